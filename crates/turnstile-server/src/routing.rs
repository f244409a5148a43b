//! Getting a request to the leader: run it here if this node leads, otherwise hand it to the
//! leader over the peer network, and wait for a leader (up to about two election timeouts)
//! when none is known or reachable.
//!
//! Retrying is safe only while the request certainly was not appended: a `NotLeader` or
//! `NoQuorum` answer (a leader without a valid quorum lease appends nothing),
//! or a peer call that never left this node. Anything else that fails mid-flight is
//! `Indeterminate`, and the client resolves it by retrying with the same `request_id`.
//!
//! A follower cut off from its leader still knows the leader's id (with PreVote it never
//! campaigns), and a forward into a real partition is not refused: its packets are dropped.
//! So a follower forwards only to a leader it has heard from within an election timeout (a
//! leader heartbeats several times in one), and gives up on a forward in flight as soon as the
//! leader falls silent. A write sent into the minority side is answered `503 no_quorum` (nothing
//! sent) or `504 indeterminate` (sent, outcome unknown) within about two election timeouts,
//! not after the request's whole timeout, and the client moves on to another node.

use openraft::async_runtime::WatchReceiver;
use std::future::Future;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;
use turnstile_raft::network::PeerError;

use crate::app::App;
use crate::proto::RouteError;

/// Extra time a forwarding node waits beyond the leader's own deadline.
const FORWARD_MARGIN_MS: u64 = 500;

impl App {
    /// Runs `local` on the leader: here, or on the leader via `path` with `req`.
    pub(crate) async fn on_leader<Req, T, F, Fut>(
        &self,
        path: &str,
        req: &Req,
        timeout_ms: u64,
        local: F,
    ) -> Result<T, RouteError>
    where
        Req: Serialize,
        T: DeserializeOwned,
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, RouteError>>,
    {
        let give_up_at = Instant::now() + Duration::from_millis(self.cfg.no_quorum_after_ms());
        let mut metrics = self.raft.metrics();
        loop {
            let attempt = match self.current_leader() {
                Some(id) if id == self.node_id() => local().await,
                // Known but silent: most likely on the other side of a partition. Nothing is
                // sent; the loop waits for it to be heard again or for a new leader.
                Some(_) if !self.heard_leader_within(self.leader_silence()) => {
                    Err(RouteError::NoQuorum)
                }
                Some(id) => self.forward(id, path, req, timeout_ms).await,
                None => Err(RouteError::NotLeader { leader_id: None }),
            };
            // Nothing was appended in either case: a leader elected a moment ago holds no
            // quorum lease until its first round of acknowledgements, so wait for one.
            let (Err(RouteError::NotLeader { .. }) | Err(RouteError::NoQuorum)) = attempt else {
                return attempt;
            };
            let now = Instant::now();
            if now >= give_up_at {
                return Err(RouteError::NoQuorum);
            }
            // Wake on a leader change, or poll again after a heartbeat (a known but
            // unreachable leader does not change the metrics).
            let wait = Duration::from_millis(self.cfg.heartbeat_ms).min(give_up_at - now);
            let _ = tokio::time::timeout(wait, metrics.changed()).await;
        }
    }

    async fn forward<Req: Serialize, T: DeserializeOwned>(
        &self,
        leader: u64,
        path: &str,
        req: &Req,
        timeout_ms: u64,
    ) -> Result<T, RouteError> {
        let Some(addr) = self.node_addr(leader) else {
            return Err(RouteError::NotLeader { leader_id: None });
        };
        let timeout = Duration::from_millis(timeout_ms + FORWARD_MARGIN_MS);
        let rpc = self
            .peers
            .rpc::<Req, Result<T, RouteError>>(leader, &addr, path, req, timeout);
        let outcome = tokio::select! {
            outcome = rpc => outcome,
            silent_ms = self.leader_falls_silent() => {
                // Maybe delivered, maybe applied: only a resend with the same request_id, to
                // a node that can reach a leader, can tell.
                tracing::warn!(
                    leader,
                    silent_ms,
                    "gave up on a forwarded request: no append from the leader in {silent_ms} ms"
                );
                return Err(RouteError::Indeterminate);
            }
        };
        match outcome {
            Ok(answer) => answer,
            Err(e) if e.not_sent() => Err(RouteError::NotLeader { leader_id: None }),
            // Refused by the peer's gate (wrong phase, cut link): its handler never ran.
            Err(PeerError::Refused { status: 503, .. }) => {
                Err(RouteError::NotLeader { leader_id: None })
            }
            // Wrong secret or another cluster: a misconfiguration, and nothing ran.
            Err(
                e @ PeerError::Refused {
                    status: 401 | 409, ..
                },
            ) => {
                tracing::error!(leader, error = %e, "leader refused this node's request");
                Err(RouteError::Unavailable {
                    reason: e.to_string(),
                })
            }
            Err(e) => {
                tracing::warn!(leader, error = %e, "forwarded request failed mid-flight");
                Err(RouteError::Indeterminate)
            }
        }
    }

    /// How long a follower may go without an append from its leader before it takes the
    /// leader for unreachable: one maximum election timeout, several heartbeats.
    fn leader_silence(&self) -> Duration {
        Duration::from_millis(self.cfg.election_timeout_ms_max)
    }

    /// Resolves, with the silence so far in ms, once no append has come from the leader for
    /// [`Self::leader_silence`]; checked every heartbeat. A leader sends appends while it
    /// handles a forwarded request (it heartbeats every follower), so a healthy forward,
    /// even a long queued acquire, never trips it.
    async fn leader_falls_silent(&self) -> u64 {
        let silence = self.leader_silence();
        let every = Duration::from_millis(self.cfg.heartbeat_ms.max(1));
        loop {
            tokio::time::sleep(every).await;
            if !self.heard_leader_within(silence) {
                return u64::try_from(silence.as_millis()).unwrap_or(u64::MAX);
            }
        }
    }
}
