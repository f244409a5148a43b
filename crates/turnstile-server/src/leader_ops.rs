//! What the leader does with a routed request: stamp and propose a write, or serve a
//! linearizable read after a ReadIndex round. Membership changes are in `membership.rs`.

use std::time::Duration;

use openraft::errors::{ClientWriteError, ForwardReason, LinearizableReadError, RaftError};
use openraft::ReadPolicy;
use turnstile_core::Envelope;

use crate::app::App;
use crate::proposer::ProposeError;
use crate::proto::{ProposeRequest, Proposed, ReadAnswer, ReadQuery, RouteError};
use turnstile_core::auth::{Access, Kind};

use crate::auth_views::{AuthView, WhoamiView};
use crate::election_views::ElectionView;
use crate::ranges;
use crate::views::{CounterView, FenceView, KeyView, LeaseView, LockView};

type WriteError = RaftError<
    turnstile_raft::types::TypeConfig,
    ClientWriteError<turnstile_raft::types::TypeConfig>,
>;

pub(crate) fn route_error(e: WriteError) -> RouteError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f))
            if f.reason == ForwardReason::LeaseExpired =>
        {
            RouteError::NoQuorum
        }
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => RouteError::NotLeader {
            leader_id: f.leader_id,
        },
        RaftError::APIError(ClientWriteError::LogEntryDiscarded(_)) => RouteError::Indeterminate,
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            RouteError::Unavailable {
                reason: e.to_string(),
            }
        }
        RaftError::APIError(ClientWriteError::PreconditionFailed(e)) => RouteError::Unavailable {
            reason: e.to_string(),
        },
        RaftError::Fatal(f) => RouteError::Unavailable {
            reason: f.to_string(),
        },
    }
}

impl App {
    /// Stamps a write with the leader clock and proposes it; waits up to `timeout_ms` for it
    /// to commit and apply.
    pub(crate) async fn propose_local(&self, req: &ProposeRequest) -> Result<Proposed, RouteError> {
        if !self.is_leader() {
            return Err(RouteError::NotLeader {
                leader_id: self.current_leader(),
            });
        }
        let (sm_time_ms, has_cluster_id) = {
            let inner = self.sm.read();
            (inner.state.sm_time_ms, inner.state.cluster_id.is_some())
        };
        // Refused before anything is appended, so the client may retry elsewhere or later.
        self.disk
            .check_for(&req.command)
            .map_err(|e| RouteError::Unavailable {
                reason: e.to_string(),
            })?;
        // Every grant carries the cluster id; until the new cluster has chosen one (the
        // driver's first entry), client writes wait. Nothing is appended, so this retries.
        if !has_cluster_id && !matches!(req.command, turnstile_core::Command::InitCluster { .. }) {
            return Err(RouteError::NotLeader { leader_id: None });
        }
        let now_ms = self.clock.now_ms(self.term(), sm_time_ms);
        let env = Envelope {
            now_ms,
            request_id: req.request_id.clone(),
            command: req.command.clone(),
        };
        let write = self.proposer.write(env);
        match tokio::time::timeout(Duration::from_millis(req.timeout_ms), write).await {
            Err(_elapsed) => Err(RouteError::Indeterminate),
            Ok(Err(ProposeError::Unanswered)) => Err(RouteError::Indeterminate),
            Ok(Err(stopped @ ProposeError::Stopped)) => Err(RouteError::Unavailable {
                reason: stopped.to_string(),
            }),
            Ok(Ok(Err(e))) => Err(route_error(e)),
            Ok(Ok(Ok(response))) => {
                let cluster_id = self.sm.read().state.cluster_id.clone();
                Ok(Proposed {
                    response,
                    cluster_id,
                })
            }
        }
    }

    /// Confirms leadership with a quorum (ReadIndex, never a clock-based lease), waits for the
    /// state machine to reach the read index, then reads.
    pub(crate) async fn read_local(&self, query: &ReadQuery) -> Result<ReadAnswer, RouteError> {
        self.read_barrier().await?;
        Ok(self.answer_locally(query))
    }

    /// The ReadIndex round of a linearizable read: after it, this leader's applied state holds
    /// every write acknowledged before the call.
    pub(crate) async fn read_barrier(&self) -> Result<(), RouteError> {
        let timeout = Duration::from_millis(self.cfg.no_quorum_after_ms());
        match tokio::time::timeout(
            timeout,
            self.raft.ensure_linearizable(ReadPolicy::ReadIndex),
        )
        .await
        {
            Err(_elapsed) => Err(RouteError::NoQuorum),
            Ok(Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(f)))) => {
                Err(RouteError::NotLeader {
                    leader_id: f.leader_id,
                })
            }
            Ok(Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(_)))) => {
                Err(RouteError::NoQuorum)
            }
            Ok(Err(RaftError::Fatal(f))) => Err(RouteError::Unavailable {
                reason: f.to_string(),
            }),
            Ok(Ok(_)) => Ok(()),
        }
    }

    /// Answers a read from this node's applied state. Linearizable only after ReadIndex.
    pub(crate) fn answer_locally(&self, query: &ReadQuery) -> ReadAnswer {
        if let Some(answer) = self.answer_key_span(query) {
            return answer;
        }
        let term = self.term();
        let inner = self.sm.read();
        let state = &inner.state;
        let now_ms = self.clock.now_ms(term, state.sm_time_ms);
        match query {
            ReadQuery::As { principal, query } => {
                match (judge_read(state, principal, query), &**query) {
                    (Err(reason), _) => ReadAnswer::Denied { reason },
                    (Ok(()), ReadQuery::Whoami) => {
                        ReadAnswer::Whoami(WhoamiView::of(state, principal))
                    }
                    (Ok(()), ReadQuery::Leases(r)) => {
                        let owner = (principal != turnstile_core::auth::ROOT).then_some(principal);
                        ReadAnswer::Leases(ranges::leases(
                            state,
                            owner.map(String::as_str),
                            r,
                            now_ms,
                        ))
                    }
                    (Ok(()), query) => {
                        redact(state, principal, query, answer(state, query, now_ms))
                    }
                }
            }
            query => answer(state, query, now_ms),
        }
    }
}

impl App {
    /// A key span (`crate::key_span`), judged under the state lock and scanned after it on an
    /// O(1) copy of the key map, so a large span does not hold apply up. `None`: not a span.
    fn answer_key_span(&self, query: &ReadQuery) -> Option<ReadAnswer> {
        let (principal, span) = match query {
            ReadQuery::KeySpan(span) => (None, span),
            ReadQuery::As { principal, query } => match &**query {
                ReadQuery::KeySpan(span) => (Some(principal.as_str()), span),
                _ => return None,
            },
            _ => return None,
        };
        let (keys, revision) = {
            let inner = self.sm.read();
            let state = &inner.state;
            if let Some(p) = principal {
                if let Err(reason) = judge_read(state, p, &ReadQuery::KeySpan(span.clone())) {
                    return Some(ReadAnswer::Denied { reason });
                }
            }
            (state.keys.clone(), state.applied_index)
        };
        let mut answer = crate::key_span::read(&keys, span, revision);
        drop(keys);
        if let (Some(p), Ok(a)) = (principal, &mut answer) {
            let inner = self.sm.read();
            for kv in &mut a.kvs {
                kv.lease_id = kv.lease_id.filter(|id| inner.state.auth.owns_lease(p, *id));
            }
        }
        Some(ReadAnswer::KeySpan(answer))
    }
}

fn answer(state: &turnstile_core::State, query: &ReadQuery, now_ms: u64) -> ReadAnswer {
    match query {
        ReadQuery::Lease { lease_id } => ReadAnswer::Lease(LeaseView::of(state, *lease_id, now_ms)),
        ReadQuery::Lock { name } => ReadAnswer::Lock(LockView::of(state, name)),
        ReadQuery::Key { key } => ReadAnswer::Key(KeyView::of(state, key)),
        ReadQuery::Counter { name } => ReadAnswer::Counter(CounterView::of(state, name)),
        ReadQuery::Fence { name, token } => ReadAnswer::Fence(FenceView::of(state, name, *token)),
        ReadQuery::Auth => ReadAnswer::Auth(AuthView::of(state)),
        ReadQuery::Election { name } => ReadAnswer::Election(ElectionView::of(state, name)),
        ReadQuery::Keys(r) => ReadAnswer::Keys(ranges::keys(state, r)),
        ReadQuery::Locks(r) => ReadAnswer::Locks(ranges::locks(state, r)),
        ReadQuery::Elections(r) => ReadAnswer::Elections(ranges::elections(state, r)),
        ReadQuery::Leases(r) => ReadAnswer::Leases(ranges::leases(state, None, r, now_ms)),
        ReadQuery::KeySpan(span) => ReadAnswer::KeySpan(crate::key_span::read(
            &state.keys,
            span,
            state.applied_index,
        )),
        ReadQuery::Whoami | ReadQuery::As { .. } => ReadAnswer::Denied {
            reason: "no principal".into(),
        },
    }
}

/// The read permission `query` needs: leases need none (only their owner sees them, below);
/// locks and fences need read on the lock, keys and counters read on themselves. A range
/// needs read on its whole prefix: a permission whose prefix starts the range's (so
/// `allowed` on the range's prefix itself), never item by item (`crate::ranges`).
fn judge_read(
    state: &turnstile_core::State,
    principal: &str,
    query: &ReadQuery,
) -> Result<(), String> {
    let need = match query {
        ReadQuery::Lease { .. } | ReadQuery::Leases(_) | ReadQuery::Whoami => return Ok(()),
        ReadQuery::Keys(r) => (Kind::Key, &r.prefix),
        ReadQuery::Locks(r) | ReadQuery::Elections(r) => (Kind::Lock, &r.prefix),
        ReadQuery::Auth if principal == turnstile_core::auth::ROOT => return Ok(()),
        ReadQuery::Auth => return Err(format!("{principal} is not root: auth is for root only")),
        ReadQuery::Lock { name } | ReadQuery::Fence { name, .. } | ReadQuery::Election { name } => {
            (Kind::Lock, name)
        }
        ReadQuery::Key { key } => (Kind::Key, key),
        ReadQuery::KeySpan(span) => {
            return state
                .auth
                .require(principal, Kind::Key, span.guard_prefix(), Access::Read)
                .map_err(|e| match e {
                    turnstile_core::ApplyError::PermissionDenied { reason } => reason,
                    other => other.to_string(),
                })
        }
        ReadQuery::Counter { name } => (Kind::Counter, name),
        ReadQuery::As { .. } => return Err("nested principal".into()),
    };
    state
        .auth
        .require(principal, need.0, need.1, Access::Read)
        .map_err(|e| match e {
            turnstile_core::ApplyError::PermissionDenied { reason } => reason,
            other => other.to_string(),
        })
}

/// Hides from `principal` what belongs to other principals' leases.
fn redact(
    state: &turnstile_core::State,
    principal: &str,
    query: &ReadQuery,
    answer: ReadAnswer,
) -> ReadAnswer {
    let owns = |id: u64| state.auth.owns_lease(principal, id);
    match answer {
        ReadAnswer::Lease(Some(v)) if !owns(v.lease_id) => ReadAnswer::Lease(None),
        ReadAnswer::Lock(v) => ReadAnswer::Lock(v.redacted(state, principal)),
        ReadAnswer::Election(v) => ReadAnswer::Election(v.redacted(state, principal)),
        ReadAnswer::Locks(page) => ReadAnswer::Locks(page.map(|v| v.redacted(state, principal))),
        ReadAnswer::Elections(page) => {
            ReadAnswer::Elections(page.map(|v| v.redacted(state, principal)))
        }
        ReadAnswer::Keys(mut page) => {
            for v in &mut page.items {
                v.lease_id = v.lease_id.filter(|id| owns(*id));
            }
            ReadAnswer::Keys(page)
        }
        ReadAnswer::Key(Some(mut v)) => {
            v.lease_id = v.lease_id.filter(|id| owns(*id));
            ReadAnswer::Key(Some(v))
        }
        ReadAnswer::Fence(mut f) => {
            let ReadQuery::Fence { name, .. } = query else {
                return ReadAnswer::Fence(f);
            };
            let holder = |t: u64| {
                let lock = state.locks.get(name)?;
                lock.holders
                    .iter()
                    .find(|h| h.token == t)
                    .map(|h| h.lease_id)
            };
            if f.current_token.and_then(holder).is_some_and(|id| !owns(id)) {
                f.current_token = None;
                f.current = false;
            }
            ReadAnswer::Fence(f)
        }
        other => other,
    }
}
