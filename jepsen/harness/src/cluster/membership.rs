//! Membership changes as an operator makes them: removing a node, and replacing a node whose
//! disk was lost (docs/operations.md, "Replacing a node"): wipe it, remove it, add it back as
//! a learner (which waits until it has caught up), promote it.
//!
//! Every step is checked against the leader's membership before it is sent and retried on any
//! failure, because a membership call that meets a leader change answers `503` or
//! `504 indeterminate` and may still have happened: the membership, not the answer, says which
//! step comes next.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};

use super::{ProcCluster, WAIT_MS_MAX};

/// How long a re-admission may take in all: a learner catching up from a snapshot under load
/// takes seconds, and each step may meet an election.
const READMIT_MS_MAX: u64 = 2 * WAIT_MS_MAX;
/// Pause between two attempts of a step that failed.
const RETRY_MS: u64 = 300;

/// Where node `id` stands in the leader's membership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    Absent,
    Learner,
    Voter,
}

impl ProcCluster {
    /// Deletes everything in node `id`'s data dir (the node must be stopped). The dir itself
    /// stays, so a container's bind mount keeps pointing at it.
    pub fn wipe(&self, id: u64) -> anyhow::Result<()> {
        if self.is_running(id) {
            bail!("node {id} is running; stop it before wiping its disk");
        }
        let dir = self.data_dir(id);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
        };
        for entry in entries {
            let path = entry?.path();
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.with_context(|| format!("cannot remove {}", path.display()))?;
        }
        Ok(())
    }

    /// Removes node `id` from the membership (it keeps running, as a node an operator takes
    /// out does until it is stopped). Returns once the leader's membership no longer lists it;
    /// refused while `id` leads, or while removing it would leave no answering majority, and
    /// retried until [`READMIT_MS_MAX`].
    pub async fn remove_member(&self, id: u64) -> anyhow::Result<()> {
        let removed = retry_steps(|| async {
            let (leader, _) = self.leader().await?;
            if self.standing(leader, id).await? == Standing::Absent {
                return Ok(true);
            }
            self.remove_via(leader, id).await?;
            Ok(false)
        })
        .await;
        removed
            .map(|_| ())
            .with_context(|| format!("node {id} was not removed"))
    }

    /// The ids the leader's membership lists (voters and learners).
    pub async fn members(&self) -> anyhow::Result<BTreeSet<u64>> {
        let (leader, _) = self.leader().await?;
        let members = self.member_list(leader).await?;
        Ok(members.iter().filter_map(|m| m["id"].as_u64()).collect())
    }

    /// Node `id` loses its disk: SIGKILLed if running, its data dir emptied, started again. It
    /// comes up waiting to be re-admitted.
    pub fn restart_empty(&mut self, id: u64) -> anyhow::Result<()> {
        if self.is_running(id) {
            self.kill(id)?;
        }
        self.wipe(id)?;
        self.restart(id)
    }

    /// Replaces node `id` as an operator replaces a node with a lost disk: stops it, empties its
    /// data dir, starts it again and re-admits it. Returns how long the re-admission took.
    pub async fn replace(&mut self, id: u64) -> anyhow::Result<Duration> {
        self.restart_empty(id)?;
        self.readmit(id).await
    }

    /// Re-admits node `id`, running on an empty data dir: removes it from the membership if it
    /// is still there, adds it as a learner, promotes it, and waits until it reports itself a
    /// member. Returns how long that took.
    pub async fn readmit(&self, id: u64) -> anyhow::Result<Duration> {
        retry_steps(|| self.readmit_step(id))
            .await
            .with_context(|| format!("node {id} was not re-admitted"))
    }

    /// Takes the next step of a re-admission; true once node `id` is a voter that knows it.
    async fn readmit_step(&self, id: u64) -> anyhow::Result<bool> {
        let (leader, _) = self.leader().await?;
        let standing = self.standing(leader, id).await?;
        let phase = self.status(id).await.map(|s| s["phase"].clone());
        let phase = phase.as_ref().ok().and_then(Value::as_str);
        match (standing, phase) {
            (Standing::Voter, Some("member")) => return Ok(true),
            // A voter that promotion told to vote but that has not said so yet: wait.
            (Standing::Voter, Some("learning")) => {
                tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
                return Ok(false);
            }
            // Still a member from before its disk was lost: take it out first.
            (Standing::Voter | Standing::Learner, Some("awaiting" | "empty") | None) => {
                self.remove_via(leader, id).await?;
            }
            (Standing::Absent, _) => {
                let body = json!({ "id": id, "addr": self.addr(id).to_string() });
                let (code, v) = self.post(leader, "/v1/members", body).await?;
                expect_ok("add as learner", id, code, &v)?;
            }
            (Standing::Learner, Some(_)) => {
                let path = format!("/v1/members/{id}/promote");
                let (code, v) = self.post(leader, &path, json!({})).await?;
                expect_ok("promote", id, code, &v)?;
            }
            (Standing::Voter, Some(other)) => bail!("node {id} is a voter in phase {other}"),
        }
        Ok(false)
    }

    /// Sends node `id`'s removal to `leader`.
    async fn remove_via(&self, leader: u64, id: u64) -> anyhow::Result<()> {
        let path = format!("/v1/members/{id}");
        let (code, v) = self
            .call(leader, reqwest::Method::DELETE, &path, None)
            .await?;
        expect_ok("remove", id, code, &v)
    }

    /// Node `id`'s place in node `via`'s membership.
    async fn standing(&self, via: u64, id: u64) -> anyhow::Result<Standing> {
        let members = self.member_list(via).await?;
        Ok(
            match members.iter().find(|m| m["id"].as_u64() == Some(id)) {
                None => Standing::Absent,
                Some(m) if m["voter"] == true => Standing::Voter,
                Some(_) => Standing::Learner,
            },
        )
    }

    /// The `members` list of node `via`'s `GET /v1/members`.
    async fn member_list(&self, via: u64) -> anyhow::Result<Vec<Value>> {
        let (code, mut v) = self.get(via, "/v1/members").await?;
        if code != 200 {
            bail!("members from node {via}: {code} {v}");
        }
        match v["members"].take() {
            Value::Array(members) => Ok(members),
            _ => bail!("members from node {via} has no list: {v}"),
        }
    }
}

/// Runs `step` until it answers true (done), retrying every [`RETRY_MS`] after an error, for
/// at most [`READMIT_MS_MAX`]. Returns how long it took.
async fn retry_steps<F, Fut>(mut step: F) -> anyhow::Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let started = Instant::now();
    let deadline = started + Duration::from_millis(READMIT_MS_MAX);
    let mut last_error = String::from("no attempt finished");
    while Instant::now() < deadline {
        match step().await {
            Ok(true) => return Ok(started.elapsed()),
            Ok(false) => {}
            Err(e) => {
                last_error = format!("{e:#}");
                tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
            }
        }
    }
    bail!("not done within {READMIT_MS_MAX} ms; last error: {last_error}")
}

fn expect_ok(step: &str, id: u64, code: u16, v: &Value) -> anyhow::Result<()> {
    if code == 200 {
        Ok(())
    } else {
        bail!("{step} node {id}: {code} {v}")
    }
}
