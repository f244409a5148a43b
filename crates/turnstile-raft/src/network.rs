//! The peer network: openraft's `RaftNetworkV2` over HTTP with bincode bodies.
//!
//! One `reqwest::Client` per node keeps connections to peers alive and reuses them. Every
//! request carries the cluster secret (peers refuse RPCs without it), the sender's node id,
//! and the sender's cluster id once known (a node refuses RPCs from another cluster). Connect
//! failures and fault-injected cuts are reported as `Unreachable`, so openraft backs off;
//! RPC deadlines come from openraft's `RPCOption`.

use std::future::Future;
use std::sync::{Arc, RwLock};
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
use crate::types::{Node, NodeId, Snapshot, SnapshotData, SnapshotMeta, TypeConfig, Vote};

/// Header carrying the shared cluster secret.
pub const SECRET_HEADER: &str = "x-turnstile-secret";
/// Header carrying the sending node's id.
pub const FROM_HEADER: &str = "x-turnstile-from";
/// Header carrying the sender's cluster id, when it knows one.
pub const CLUSTER_ID_HEADER: &str = "x-turnstile-cluster-id";
/// Content type of bincode bodies.
pub const BINCODE_CONTENT_TYPE: &str = "application/x-turnstile-bincode";

/// How long to wait for a TCP connection to a peer.
const CONNECT_TIMEOUT_MS: u64 = 300;

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
    #[error("peer {peer} did not answer in time")]
    Timeout { peer: NodeId },
    #[error("request to peer {peer} failed: {source}")]
    Http {
        peer: NodeId,
        source: reqwest::Error,
    },
    #[error("peer {peer} refused: HTTP {status}: {body}")]
    Refused {
        peer: NodeId,
        status: u16,
        body: String,
    },
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
        matches!(self, PeerError::Blocked { .. } | PeerError::Connect { .. })
    }
}

/// Who this node is, as told to peers on every RPC.
#[derive(Debug, Clone)]
pub struct PeerIdentity {
    pub node_id: NodeId,
    pub secret: Arc<str>,
    /// Filled in once the replicated cluster id is known.
    pub cluster_id: Arc<RwLock<Option<String>>>,
}

impl PeerIdentity {
    pub fn cluster_id(&self) -> Option<String> {
        self.cluster_id.read().ok().and_then(|c| c.clone())
    }
}

/// An HTTP client for node-to-node calls, shared by Raft RPCs and leader proxying.
#[derive(Debug, Clone)]
pub struct PeerClient {
    http: reqwest::Client,
    identity: PeerIdentity,
    faults: Faults,
}

impl PeerClient {
    pub fn new(identity: PeerIdentity, faults: Faults) -> Result<PeerClient, reqwest::Error> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
            .pool_idle_timeout(Duration::from_secs(90))
            .build()?;
        Ok(PeerClient {
            http,
            identity,
            faults,
        })
    }

    pub fn identity(&self) -> &PeerIdentity {
        &self.identity
    }

    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Starts a request to `peer` at `addr` with the identity headers set, or fails at once if
    /// the link is cut.
    pub fn request(
        &self,
        method: reqwest::Method,
        peer: NodeId,
        addr: &str,
        path: &str,
    ) -> Result<reqwest::RequestBuilder, PeerError> {
        if self.faults.is_blocked(peer) {
            return Err(PeerError::Blocked { peer });
        }
        let mut rb = self
            .http
            .request(method, format!("http://{addr}{path}"))
            .header(SECRET_HEADER, &*self.identity.secret)
            .header(FROM_HEADER, self.identity.node_id);
        if let Some(cid) = self.identity.cluster_id() {
            rb = rb.header(CLUSTER_ID_HEADER, cid);
        }
        Ok(rb)
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
        let body = codec::encode(req).map_err(|source| PeerError::Decode { peer, source })?;
        let rb = self
            .request(reqwest::Method::POST, peer, addr, path)?
            .header(reqwest::header::CONTENT_TYPE, BINCODE_CONTENT_TYPE)
            .timeout(timeout)
            .body(body);
        let resp = self.send(peer, rb).await?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .map_err(|source| PeerError::Http { peer, source })?;
        if !status.is_success() {
            let body = String::from_utf8_lossy(&bytes).chars().take(200).collect();
            return Err(PeerError::Refused {
                peer,
                status: status.as_u16(),
                body,
            });
        }
        let result: Result<Resp, String> =
            codec::decode(&bytes).map_err(|source| PeerError::Decode { peer, source })?;
        result.map_err(|message| PeerError::Remote { peer, message })
    }
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
        }
    }
}

/// The connection to one peer.
pub struct PeerNetwork {
    client: PeerClient,
    target: NodeId,
    addr: String,
}

fn to_rpc_error(e: PeerError) -> RPCError<TypeConfig> {
    match e {
        PeerError::Blocked { .. }
        | PeerError::Connect { .. }
        | PeerError::Refused { .. }
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
        self.call("/raft/append", &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call("/raft/vote", &rpc, &option).await
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

/// The body of `/raft/snapshot`: the leader's vote, the snapshot meta and the file bytes.
pub type SnapshotRequest = (Vote, SnapshotMeta, Vec<u8>);
