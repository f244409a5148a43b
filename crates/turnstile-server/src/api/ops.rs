//! The two operations every handler is built from: a routed write that must produce a
//! successful `Outcome`, and a routed linearizable read.

use turnstile_core::{ApplyError, Command, Outcome};

use crate::app::App;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::proto::{ProposeRequest, Proposed, ReadAnswer, ReadQuery, PROPOSE_PATH, READ_PATH};

/// A committed, successful write.
pub struct Written {
    pub outcome: Outcome,
    pub revision: u64,
    pub term: u64,
    pub cluster_id: Option<String>,
}

impl App {
    /// Routes a write to the leader and turns a refusal into an `ApiError`.
    /// `caller`'s command is wrapped for judgement in apply and its request id scoped
    /// (`crate::auth::Caller`).
    pub async fn write(
        &self,
        caller: &Caller,
        request_id: Option<String>,
        command: Command,
    ) -> Result<Written, ApiError> {
        self.write_scoped(caller, caller.request_id(request_id), command)
            .await
    }

    /// [`App::write`] with a request id already scoped to the caller (a waiter id).
    pub async fn write_scoped(
        &self,
        caller: &Caller,
        request_id: Option<String>,
        command: Command,
    ) -> Result<Written, ApiError> {
        let (request_id, command) = self.cfg.bugs.break_write(request_id, command);
        let command = caller.command(command);
        let kind = command.kind();
        let req = ProposeRequest {
            request_id,
            command,
            timeout_ms: self.cfg.request_timeout_ms,
        };
        let Proposed {
            response,
            cluster_id,
        } = self
            .on_leader(PROPOSE_PATH, &req, req.timeout_ms, || {
                self.propose_local(&req)
            })
            .await?;
        match response.outcome {
            Ok(outcome) => Ok(Written {
                outcome,
                revision: response.revision,
                term: response.term,
                cluster_id,
            }),
            Err(e) => {
                if let ApplyError::Fenced {
                    lock,
                    token,
                    current_token,
                } = &e
                {
                    tracing::warn!(lock = %lock, token, ?current_token, "fenced write rejected");
                    self.stats
                        .fenced_rejections
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                if let ApplyError::PermissionDenied { reason }
                | ApplyError::Unauthenticated { reason } = &e
                {
                    self.denials.client(kind, caller.principal(), reason);
                }
                Err(ApiError::Apply(e))
            }
        }
    }

    /// Routes a linearizable read to the leader.
    /// For a principal the leader judges the read and hides what is not the caller's.
    pub async fn read(&self, caller: &Caller, query: ReadQuery) -> Result<ReadAnswer, ApiError> {
        let query = match caller.principal() {
            Some(principal) => ReadQuery::As {
                principal: principal.to_string(),
                query: Box::new(query),
            },
            None => query,
        };
        if self.cfg.bugs.local_reads() {
            return Ok(self.answer_locally(&query));
        }
        let timeout_ms = self.cfg.request_timeout_ms;
        let answer = self
            .on_leader(READ_PATH, &query, timeout_ms, || self.read_local(&query))
            .await;
        // A read that failed mid-flight changed nothing: report it as no answer, not unknown.
        let answer = answer.map_err(|e| match e {
            crate::proto::RouteError::Indeterminate => crate::proto::RouteError::NoQuorum.into(),
            e => ApiError::from(e),
        })?;
        match answer {
            ReadAnswer::Denied { reason } => {
                self.denials.client("read", caller.principal(), &reason);
                Err(ApiError::Apply(ApplyError::PermissionDenied { reason }))
            }
            answer => Ok(answer),
        }
    }
}

/// Unexpected outcome for the command sent: a bug, reported without panicking, as `500`.
pub fn unexpected(outcome: &Outcome) -> ApiError {
    tracing::error!(?outcome, "unexpected outcome");
    ApiError::Internal("unexpected outcome for this request (a server bug; logged)".into())
}

/// A read answered with the wrong kind of view: a bug, reported without panicking, as `500`.
pub fn unexpected_answer(answer: &ReadAnswer) -> ApiError {
    tracing::error!(?answer, "unexpected read answer");
    ApiError::Internal("unexpected answer to this read (a server bug; logged)".into())
}
