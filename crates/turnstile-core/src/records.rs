//! Request-id records: the first outcome of every request made with a `request_id`, kept so a
//! retry gets that outcome instead of acting twice, and bounded by design.
//!
//! A record is in one of two places:
//! - **pinned** by a live lease while the request's effect is still current: a lease's own
//!   grant, and an acquire that still waits or whose grant is still held (a retry of a queued
//!   acquire re-attaches to its queue entry; a retry of a held acquire returns its token);
//! - **on the retry window** of [`limits::REQUEST_RECORD_WINDOW_MS`] otherwise: every other
//!   request as soon as it is answered, and a pinned one as soon as its wait ends, its hold is
//!   released or its lease ends.
//!
//! A client that has its answer may acknowledge it (`Command::Ack`): the record then goes at
//! once. So what a session keeps is its leases, what it holds and waits for, and its
//! unacknowledged answers of the last window; never its history. (Records of the Raft
//! dissertation's §6.3 client sessions, with acknowledgments by id rather than by sequence
//! number, so that any HTTP client can use them.)

use crate::command::Command;
use crate::limits;
use crate::response::{Outcome, Response};
use crate::state::{RequestRecord, State};

impl State {
    /// Stores the first outcome of `request_id`, pinned or on the window (module docs).
    pub(crate) fn record_request(
        &mut self,
        request_id: &str,
        sha: [u8; 32],
        cmd: &Command,
        response: &Response,
    ) {
        let pin = match (cmd, &response.outcome) {
            (Command::LeaseGrant { .. }, Ok(Outcome::LeaseGranted { lease_id, .. })) => {
                Some(*lease_id)
            }
            (
                Command::Acquire { lease_id, .. }
                | Command::AcquireFor { lease_id, .. }
                | Command::LockAcquire { lease_id, .. }
                | Command::Campaign { lease_id, .. },
                Ok(Outcome::Granted { .. } | Outcome::Queued { .. }),
            ) => Some(*lease_id),
            _ => None,
        }
        .filter(|id| self.leases.contains_key(id));
        self.auth.record_added(request_id);
        self.requests.insert(
            request_id.to_string(),
            RequestRecord {
                command_sha256: sha,
                response: response.clone(),
                lease_id: None,
                expires_ms: None,
            }
            .into(),
        );
        match pin {
            Some(lease_id) => self.pin_record(request_id, lease_id),
            None => self.unpin_record(request_id),
        }
    }

    /// Pins a record to a live lease; a record of a held grant also enters `grant_requests`.
    fn pin_record(&mut self, request_id: &str, lease_id: u64) {
        let Some(lease) = self.leases.get_mut(&lease_id) else {
            self.unpin_record(request_id);
            return;
        };
        let Some(record) = self.requests.get_mut(request_id) else {
            return;
        };
        lease.request_ids.insert(request_id.to_string());
        record.lease_id = Some(lease_id);
        if let Ok(Outcome::Granted {
            token, lease_id, ..
        }) = &record.response.outcome
        {
            self.grant_requests
                .insert((*lease_id, *token, request_id.to_string()));
        }
    }

    /// Moves a record onto the retry window (no-op if it is there already or gone).
    pub(crate) fn unpin_record(&mut self, request_id: &str) {
        let Some(record) = self.requests.get_mut(request_id) else {
            return;
        };
        if let Some(lease_id) = record.lease_id.take() {
            if let Some(lease) = self.leases.get_mut(&lease_id) {
                lease.request_ids.remove(request_id);
            }
            if let Ok(Outcome::Granted {
                token, lease_id, ..
            }) = &record.response.outcome
            {
                self.grant_requests
                    .remove(&(*lease_id, *token, request_id.to_string()));
            }
        }
        if record.expires_ms.is_none() {
            let expires_ms = self
                .sm_time_ms
                .saturating_add(limits::REQUEST_RECORD_WINDOW_MS);
            record.expires_ms = Some(expires_ms);
            self.request_expiries
                .insert((expires_ms, request_id.to_string()));
        }
    }

    /// A queued acquire got its final answer: a grant keeps the record pinned (now as a held
    /// grant); anything else ends the wait and starts the window.
    pub(crate) fn record_waiter_answer(&mut self, waiter_id: &str, response: &Response) {
        let Some(record) = self.requests.get_mut(waiter_id) else {
            return;
        };
        let pinned = record.lease_id;
        record.response = response.clone();
        match (pinned, &response.outcome) {
            (Some(lease_id), Ok(Outcome::Granted { .. })) => self.pin_record(waiter_id, lease_id),
            _ => self.unpin_record(waiter_id),
        }
    }

    /// The hold of `lease_id` on `name` with `token` ended: its acquire's record leaves for the
    /// window. (An acquire-many's record goes with the first of its locks released.)
    pub(crate) fn hold_ended(&mut self, name: &str, lease_id: u64, token: u64) {
        let ids: Vec<String> = self
            .grant_requests
            .range((lease_id, token, String::new())..(lease_id, token.saturating_add(1), String::new()))
            .map(|(_, _, id)| id.clone())
            .filter(|id| {
                self.requests.get(id).is_some_and(|r| {
                    matches!(&r.response.outcome, Ok(Outcome::Granted { names, .. }) if names.iter().any(|n| n == name))
                })
            })
            .collect();
        for id in ids {
            self.unpin_record(&id);
        }
    }

    /// `Ack`: forgets the records of requests whose answers the client has, with every index
    /// entry that names them (the lease's pin, the grant index, the window).
    pub(crate) fn ack(&mut self, request_ids: &[String]) -> Outcome {
        for id in request_ids.iter().take(limits::ACKS_PER_ENTRY_MAX) {
            let Some(record) = self.requests.remove(id) else {
                continue;
            };
            self.auth.record_removed(id);
            if let Some(lease_id) = record.lease_id {
                if let Some(lease) = self.leases.get_mut(&lease_id) {
                    lease.request_ids.remove(id);
                }
                if let Ok(Outcome::Granted {
                    token, lease_id, ..
                }) = &record.response.outcome
                {
                    self.grant_requests.remove(&(*lease_id, *token, id.clone()));
                }
            }
            if let Some(expires_ms) = record.expires_ms {
                self.request_expiries.remove(&(expires_ms, id.clone()));
            }
        }
        Outcome::Applied
    }

    /// Drops every record whose window has passed.
    pub(crate) fn expire_request_records(&mut self) {
        while let Some((expires_ms, _)) = self.request_expiries.first() {
            if *expires_ms > self.sm_time_ms {
                break;
            }
            if let Some((_, request_id)) = self.request_expiries.pop_first() {
                if self.requests.remove(&request_id).is_some() {
                    self.auth.record_removed(&request_id);
                }
            }
        }
    }

    /// Recomputes what is derived from the encoded state (`grant_requests`); called after
    /// every decode. A decoded state knows no key changes before it (`crate::key_changes`).
    pub fn rebuild_derived(&mut self) {
        self.grant_requests = self.derived_grant_requests();
        self.key_changes = crate::key_changes::KeyChanges::known_after(self.applied_index);
        self.rebuild_auth_derived();
    }

    /// `grant_requests` as the records say it must be.
    pub(crate) fn derived_grant_requests(&self) -> crate::cow::Set<(u64, u64, String)> {
        self.requests
            .iter()
            .filter(|(_, r)| r.lease_id.is_some())
            .filter_map(|(id, r)| match &r.response.outcome {
                Ok(Outcome::Granted {
                    token, lease_id, ..
                }) => Some((*lease_id, *token, id.clone())),
                _ => None,
            })
            .collect()
    }
}
