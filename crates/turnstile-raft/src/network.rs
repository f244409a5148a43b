//! The peer network: openraft's `RaftNetworkV2` over HTTP with bincode bodies.
//!
//! One `reqwest::Client` per node keeps connections to peers alive and reuses them. With TLS
//! on, peers are called over `https://` with mutual TLS: the client presents this node's
//! certificate and trusts only the cluster CA, over HTTP/1.1 only; on a certificate reload the
//! client is rebuilt and swapped in ([`PeerClient::set_tls`]), while requests in flight finish
//! on the old one. Every
//! request carries the sender's node id, its cluster id once known (a node refuses RPCs from
//! another cluster), and an HMAC keyed by the cluster secret ([`crate::peer_auth`]); the secret
//! itself never travels. A reply is read up to [`PEER_REPLY_BYTES_MAX`], and decoded or quoted
//! only if it carries a valid reply MAC, so an address that is not a member (anyone can ask
//! the leader to add one) can neither make a node allocate what it likes nor put words in its
//! errors. Connect failures and fault-injected cuts are reported as `Unreachable`, so openraft
//! backs off; RPC deadlines come from openraft's `RPCOption`. Appends and heartbeats, the bulk
//! of the traffic, go over a connection of their own per follower that the replication task
//! drives itself ([`crate::peer_conn`]), signed and checked the same way.

use std::future::Future;
use std::sync::{Arc, RwLock};

use arc_swap::ArcSwap;
use std::time::Duration;

use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::v2::RaftNetworkV2;
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::OptionalSend;
use serde::de::DeserializeOwned;
use serde::Serialize;
use turnstile_core::codec;

use crate::faults::Faults;
use crate::peer_auth::{PeerKey, RequestHead, AUTH_HEADER, REPLY_AUTH_HEADER};
use crate::peer_conn::{PeerConn, RawReply};
use crate::types::{Node, NodeId, Snapshot, SnapshotData, SnapshotMeta, TypeConfig, Vote};

/// Header carrying the sending node's id.
pub const FROM_HEADER: &str = "x-turnstile-from";
/// Header carrying the sender's cluster id, when it knows one.
pub const CLUSTER_ID_HEADER: &str = "x-turnstile-cluster-id";
/// Content type of bincode bodies.
pub const BINCODE_CONTENT_TYPE: &str = "application/x-turnstile-bincode";

/// How long to wait for a TCP connection to a peer.
pub(crate) const CONNECT_TIMEOUT_MS: u64 = 300;

/// Largest peer reply read. Replies are small (votes, append results, read answers of at most
/// a few MiB); a peer sending more is cut off rather than buffered.
pub const PEER_REPLY_BYTES_MAX: usize = 32 * 1024 * 1024;

/// A peer RPC failure, as the network sees it.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("peer {peer} is cut off by fault injection")]
    Blocked { peer: NodeId },
    #[error("cannot connect to peer {peer}: {source}")]
    Connect {
        peer: NodeId,
        source: reqwest::Error,
    },
    /// A replication connection ([`crate::peer_conn`]) could not be opened.
    #[error("cannot connect to peer {peer}: {reason}")]
    Dial { peer: NodeId, reason: String },
    #[error("peer {peer} did not answer in time")]
    Timeout { peer: NodeId },
    #[error("request to peer {peer} failed: {source}")]
    Http {
        peer: NodeId,
        source: reqwest::Error,
    },
    /// A replication connection failed mid-call (it is then dropped, never reused).
    #[error("request to peer {peer} failed: {reason}")]
    Transport { peer: NodeId, reason: String },
    #[error("peer {peer} refused: HTTP {status}: {body}")]
    Refused {
        peer: NodeId,
        status: u16,
        body: String,
    },
    /// The reply lacked a valid reply MAC: whatever answered does not hold the cluster secret
    /// (or is not a Turnstile node of this cluster). Its body is neither decoded nor quoted.
    #[error("peer {peer} answered HTTP {status} without proving it holds the cluster secret; its reply was discarded")]
    Unproven { peer: NodeId, status: u16 },
    #[error("peer {peer} sent a reply over {max} bytes")]
    ReplyTooLarge { peer: NodeId, max: usize },
    #[error("peer {peer} sent a body that does not decode: {source}")]
    Decode {
        peer: NodeId,
        source: codec::CodecError,
    },
    #[error("peer {peer} failed the RPC: {message}")]
    Remote { peer: NodeId, message: String },
}

impl PeerError {
    /// True when the request certainly never reached the peer's handler.
    pub fn not_sent(&self) -> bool {
        matches!(
            self,
            PeerError::Blocked { .. } | PeerError::Connect { .. } | PeerError::Dial { .. }
        )
    }
}

/// Who this node is, as told to peers on every RPC.
#[derive(Debug, Clone)]
pub struct PeerIdentity {
    pub node_id: NodeId,
    /// The cluster secret as an HMAC key; it is never sent.
    pub key: PeerKey,
    /// Filled in once the replicated cluster id is known.
    pub cluster_id: Arc<RwLock<Option<String>>>,
}

impl PeerIdentity {
    pub fn new(node_id: NodeId, secret: &str) -> PeerIdentity {
        PeerIdentity {
            node_id,
            key: PeerKey::new(secret),
            cluster_id: Default::default(),
        }
    }

    pub fn cluster_id(&self) -> Option<String> {
        self.cluster_id.read().ok().and_then(|c| c.clone())
    }
}

/// How this node calls its peers: swapped whole when the TLS certificates are reloaded.
#[derive(Debug)]
pub struct Transport {
    /// Every peer call but appends and heartbeats.
    http: reqwest::Client,
    /// The client config the replication connections ([`crate::peer_conn`]) open TLS with;
    /// `None` over plain HTTP.
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
    /// An idle connection is dropped after this long (below the peers' own idle timeout).
    pub(crate) pool_idle: Duration,
}

impl Transport {
    pub(crate) fn new(
        pool_idle: Duration,
        tls: Option<rustls::ClientConfig>,
    ) -> Result<Transport, reqwest::Error> {
        Ok(Transport {
            http: build_http(pool_idle, tls.clone())?,
            tls: tls.map(Arc::new),
            pool_idle,
        })
    }
}

/// An HTTP client for node-to-node calls, shared by Raft RPCs and leader proxying.
#[derive(Debug, Clone)]
pub struct PeerClient {
    /// Whether peers are called over TLS, and the idle limit, are the transport's: TLS is
    /// chosen at start and a reload keeps it.
    transport: Arc<ArcSwap<Transport>>,
    identity: PeerIdentity,
    faults: Faults,
    /// Which peers stopped answering: logged once per outage (`crate::peer_health`).
    health: Arc<crate::peer_health::PeerHealth>,
}

impl PeerClient {
    /// `pool_idle` must be below the peers' own idle timeout, so that this side drops an idle
    /// connection before the peer closes it and a request never goes out on one being closed.
    /// `tls`: this node's client config (its certificate, the cluster CA as the only root);
    /// `None` calls peers over plain HTTP.
    pub fn new(
        identity: PeerIdentity,
        faults: Faults,
        pool_idle: Duration,
        tls: Option<rustls::ClientConfig>,
    ) -> Result<PeerClient, reqwest::Error> {
        let transport = Transport::new(pool_idle, tls)?;
        Ok(PeerClient {
            transport: Arc::new(ArcSwap::from_pointee(transport)),
            identity,
            faults,
            health: Default::default(),
        })
    }

    /// Uses `tls` for every peer call from now on (a certificate reload). Connections opened
    /// with the old certificate stay with the old client until its requests finish; a
    /// replication connection is opened again for its next call. Ignored
    /// by a client that calls peers over plain HTTP: TLS is chosen at start.
    pub fn set_tls(&self, tls: rustls::ClientConfig) -> Result<(), reqwest::Error> {
        let pool_idle = self.transport.load().pool_idle;
        if !self.tls_enabled() {
            return Ok(());
        }
        self.transport
            .store(Arc::new(Transport::new(pool_idle, Some(tls))?));
        Ok(())
    }

    /// True when peers are called over mutual TLS.
    pub fn tls_enabled(&self) -> bool {
        self.transport.load().tls.is_some()
    }

    pub fn identity(&self) -> &PeerIdentity {
        &self.identity
    }

    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Starts a signed `POST path` of `body` to `peer` at `addr`, or fails at once if the link
    /// is cut. Returns the builder and the request's MAC, which the reply's MAC must cover.
    pub fn request(
        &self,
        peer: NodeId,
        addr: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(reqwest::RequestBuilder, String), PeerError> {
        let (mac, cluster_id) = self.sign(peer, path, &body)?;
        let transport = self.transport.load();
        let scheme = if transport.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let mut rb = transport
            .http
            .post(format!("{scheme}://{addr}{path}"))
            .header(FROM_HEADER, self.identity.node_id)
            .header(AUTH_HEADER, &mac)
            .header(reqwest::header::CONTENT_TYPE, BINCODE_CONTENT_TYPE)
            .body(body);
        if let Some(cid) = cluster_id {
            rb = rb.header(CLUSTER_ID_HEADER, cid);
        }
        Ok((rb, mac))
    }

    /// The MAC of a `POST path` of `body` and the cluster id it names, or `Blocked` if the
    /// link to `peer` is cut.
    fn sign(
        &self,
        peer: NodeId,
        path: &str,
        body: &[u8],
    ) -> Result<(String, Option<String>), PeerError> {
        if self.faults.is_blocked(peer) {
            return Err(PeerError::Blocked { peer });
        }
        let cluster_id = self.identity.cluster_id();
        let head = RequestHead {
            method: "POST",
            path,
            from: self.identity.node_id,
            cluster_id: cluster_id.as_deref().unwrap_or(""),
        };
        Ok((self.identity.key.sign_request(&head, body), cluster_id))
    }

    /// One bincode RPC like [`PeerClient::rpc`], over `conn` (a replication connection that
    /// the calling task drives) instead of the shared client's pool.
    pub async fn rpc_on<Req, Resp>(
        &self,
        conn: &mut PeerConn,
        peer: NodeId,
        addr: &str,
        path: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, PeerError>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
    {
        self.observed(Some(conn), peer, addr, path, req, timeout)
            .await
    }

    /// Signs `body` and sends it over `conn`. Returns the request's MAC and the reply, which is
    /// not checked yet.
    async fn exchange_on(
        &self,
        conn: &mut PeerConn,
        peer: NodeId,
        addr: &str,
        path: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<(String, RawReply), PeerError> {
        let (request_mac, cluster_id) = self.sign(peer, path, &body)?;
        let mut request = hyper::Request::post(path)
            .header(hyper::header::HOST, addr)
            .header(FROM_HEADER, self.identity.node_id)
            .header(AUTH_HEADER, &request_mac)
            .header(hyper::header::CONTENT_TYPE, BINCODE_CONTENT_TYPE);
        if let Some(cid) = cluster_id {
            request = request.header(CLUSTER_ID_HEADER, cid);
        }
        let request = request
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .map_err(|e| PeerError::Transport {
                peer,
                reason: e.to_string(),
            })?;
        let transport = self.transport.load_full();
        let reply = conn
            .exchange(&transport, peer, addr, request, timeout)
            .await?;
        // A peer cut off mid-flight must not deliver its answer either.
        if self.faults.is_blocked(peer) {
            return Err(PeerError::Blocked { peer });
        }
        Ok((request_mac, reply))
    }

    /// Decodes a reply, only if its MAC proves it comes from a holder of the cluster secret.
    fn accept<Resp: DeserializeOwned>(
        &self,
        peer: NodeId,
        request_mac: &str,
        reply: RawReply,
    ) -> Result<Resp, PeerError> {
        let RawReply {
            status,
            reply_mac,
            body,
        } = reply;
        let proven = reply_mac.is_some_and(|mac| {
            self.identity
                .key
                .verify_reply(request_mac, status, &body, &mac)
        });
        if !proven {
            return Err(PeerError::Unproven { peer, status });
        }
        if !(200..300).contains(&status) {
            let body = String::from_utf8_lossy(&body).chars().take(200).collect();
            return Err(PeerError::Refused { peer, status, body });
        }
        let result: Result<Resp, String> =
            codec::decode(&body).map_err(|source| PeerError::Decode { peer, source })?;
        result.map_err(|message| PeerError::Remote { peer, message })
    }

    /// Sends a request and maps transport failures to [`PeerError`].
    pub async fn send(
        &self,
        peer: NodeId,
        rb: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, PeerError> {
        let resp = rb.send().await.map_err(|source| {
            if source.is_connect() {
                PeerError::Connect { peer, source }
            } else if source.is_timeout() {
                PeerError::Timeout { peer }
            } else {
                PeerError::Http { peer, source }
            }
        })?;
        // A peer cut off mid-flight must not deliver its answer either.
        if self.faults.is_blocked(peer) {
            return Err(PeerError::Blocked { peer });
        }
        Ok(resp)
    }

    /// One bincode RPC: `POST path` with `req`, answered by `Result<Resp, String>`.
    pub async fn rpc<Req, Resp>(
        &self,
        peer: NodeId,
        addr: &str,
        path: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, PeerError>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
    {
        self.observed(None, peer, addr, path, req, timeout).await
    }

    /// One RPC over `conn`, or over the shared client's pool without one: encoded, signed,
    /// sent, its reply checked, and the outcome noted in the peer's health either way.
    async fn observed<Req, Resp>(
        &self,
        conn: Option<&mut PeerConn>,
        peer: NodeId,
        addr: &str,
        path: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, PeerError>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
    {
        let result = async {
            let body = codec::encode(req).map_err(|source| PeerError::Decode { peer, source })?;
            let (request_mac, reply) = match conn {
                Some(conn) => {
                    self.exchange_on(conn, peer, addr, path, body, timeout)
                        .await?
                }
                None => {
                    self.exchange_pooled(peer, addr, path, body, timeout)
                        .await?
                }
            };
            self.accept(peer, &request_mac, reply)
        }
        .await;
        self.health.observe(peer, &result);
        result
    }

    /// Peers that stopped answering this node's calls (and have not answered since).
    pub fn peers_down(&self) -> Vec<NodeId> {
        self.health.down()
    }

    /// Notes an authenticated call from `peer`: it reaches this node, so it is not down.
    pub fn heard_from(&self, peer: NodeId) {
        self.health.heard_from(peer);
    }

    /// Peer calls that did not reach their peer or got no answer, since start.
    pub fn failed_calls_total(&self) -> u64 {
        self.health.failed_calls_total()
    }

    /// Signs `body` and sends it through the shared client's pool. Returns the request's MAC
    /// and the reply, which is not checked yet.
    async fn exchange_pooled(
        &self,
        peer: NodeId,
        addr: &str,
        path: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<(String, RawReply), PeerError> {
        let (rb, request_mac) = self.request(peer, addr, path, body)?;
        let resp = self.send(peer, rb.timeout(timeout)).await?;
        let status = resp.status();
        let reply_mac = resp
            .headers()
            .get(REPLY_AUTH_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = read_bounded(peer, resp).await?;
        let reply = RawReply {
            status: status.as_u16(),
            reply_mac,
            body: body.into(),
        };
        Ok((request_mac, reply))
    }
}

/// The peer HTTP client: with `tls`, HTTPS only, HTTP/1.1 only, and the given config's roots
/// (the cluster CA) and client certificate, nothing built in.
fn build_http(
    pool_idle: Duration,
    tls: Option<rustls::ClientConfig>,
) -> Result<reqwest::Client, reqwest::Error> {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
        .pool_idle_timeout(pool_idle);
    if let Some(tls) = tls {
        builder = builder
            .use_preconfigured_tls(tls)
            .tls_built_in_root_certs(false)
            .https_only(true)
            .http1_only();
    }
    builder.build()
}

/// Reads a reply body, giving up past [`PEER_REPLY_BYTES_MAX`] without buffering the rest.
async fn read_bounded(peer: NodeId, mut resp: reqwest::Response) -> Result<Vec<u8>, PeerError> {
    if resp
        .content_length()
        .is_some_and(|len| len > PEER_REPLY_BYTES_MAX as u64)
    {
        return Err(PeerError::ReplyTooLarge {
            peer,
            max: PEER_REPLY_BYTES_MAX,
        });
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|source| PeerError::Http { peer, source })?
    {
        if bytes.len() + chunk.len() > PEER_REPLY_BYTES_MAX {
            return Err(PeerError::ReplyTooLarge {
                peer,
                max: PEER_REPLY_BYTES_MAX,
            });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Creates one [`PeerNetwork`] per target; all share the node's [`PeerClient`].
#[derive(Debug, Clone)]
pub struct PeerNetworkFactory {
    client: PeerClient,
}

impl PeerNetworkFactory {
    pub fn new(client: PeerClient) -> Self {
        PeerNetworkFactory { client }
    }
}

impl RaftNetworkFactory<TypeConfig> for PeerNetworkFactory {
    type Network = PeerNetwork;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> PeerNetwork {
        PeerNetwork {
            client: self.client.clone(),
            target,
            addr: node.addr.clone(),
            conn: PeerConn::default(),
        }
    }
}

/// The connection to one peer.
pub struct PeerNetwork {
    client: PeerClient,
    target: NodeId,
    addr: String,
    /// Appends and heartbeats: this replication stream's own connection.
    conn: PeerConn,
}

fn to_rpc_error(e: PeerError) -> RPCError<TypeConfig> {
    match e {
        PeerError::Blocked { .. }
        | PeerError::Connect { .. }
        | PeerError::Dial { .. }
        | PeerError::Refused { .. }
        | PeerError::Unproven { .. }
        | PeerError::Remote { .. } => RPCError::Unreachable(Unreachable::new(&e)),
        _ => RPCError::Network(NetworkError::new(&e)),
    }
}

impl PeerNetwork {
    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        path: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<TypeConfig>> {
        self.client
            .rpc(self.target, &self.addr, path, req, option.hard_ttl())
            .await
            .map_err(to_rpc_error)
    }
}

impl RaftNetworkV2<TypeConfig> for PeerNetwork {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.client
            .rpc_on(
                &mut self.conn,
                self.target,
                &self.addr,
                "/raft/append",
                &rpc,
                option.hard_ttl(),
            )
            .await
            .map_err(to_rpc_error)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call("/raft/vote", &rpc, &option).await
    }

    /// PreVote (on: `node.rs`): would `target` vote for this node at the next term? Nothing is
    /// persisted on either side. Every failure is an error, never a grant: openraft's default
    /// for this method makes a grant up, which would turn PreVote into a no-op.
    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(PRE_VOTE_PATH, &rpc, &option).await
    }

    /// A leader stepping down (graceful stop) asks `target` to campaign at once.
    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(TRANSFER_LEADER_PATH, &req, &option).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let req: SnapshotRequest = (vote, snapshot.meta, snapshot.snapshot.into_inner());
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            res = self.call("/raft/snapshot", &req, &option) => Ok(res?),
        }
    }
}

/// Path of the leader-transfer RPC.
pub const TRANSFER_LEADER_PATH: &str = "/raft/transfer-leader";
/// Path of the PreVote RPC.
pub const PRE_VOTE_PATH: &str = "/raft/pre-vote";

/// The body of `/raft/snapshot`: the leader's vote, the snapshot meta and the file bytes.
pub type SnapshotRequest = (Vote, SnapshotMeta, Vec<u8>);
