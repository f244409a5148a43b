//! [`Leadership`]: one won campaign under a [`Session`]. It carries the fencing token and the
//! published value, proclaims and resigns, and has its own [`Lost`] signal: it fires when the
//! session is lost (the lease ended or is no longer trusted) or when the watch shows this
//! leadership ended while the session lived on (an `election_resigned` of this token).

use futures::StreamExt;
use tokio::task::JoinHandle;

use crate::election::Campaigned;
use crate::lost::{LostReason, LostSender};
use crate::types::Fence;
use crate::{Client, Error, Lost, Session, Written};

/// A won election. Dropping it resigns in a spawned task (best effort; otherwise the
/// leadership ends with the session's lease). [`Leadership::resign`] resigns and reports.
#[derive(Debug)]
pub struct Leadership {
    session: Session,
    won: Campaigned,
    lost_tx: LostSender,
    lost: Lost,
    watcher: JoinHandle<()>,
    resigned: bool,
}

impl Leadership {
    pub(crate) fn new(session: Session, won: Campaigned) -> Leadership {
        let (lost_tx, lost) = LostSender::new();
        let watcher = tokio::spawn(watch_for_end(
            session.client().clone(),
            session.lost(),
            won.clone(),
            lost_tx.clone(),
        ));
        Leadership {
            session,
            won,
            lost_tx,
            lost,
            watcher,
            resigned: false,
        }
    }

    pub fn name(&self) -> &str {
        &self.won.name
    }

    /// The fencing token: the index of the entry that made this lease leader; greater than
    /// every earlier leader's.
    pub fn token(&self) -> u64 {
        self.won.token
    }

    /// The value last published (by the campaign or [`Leadership::proclaim`]).
    pub fn value(&self) -> &str {
        &self.won.value
    }

    pub fn lease_id(&self) -> u64 {
        self.won.lease_id
    }

    /// The issuing cluster, for resources that refuse foreign tokens.
    pub fn cluster_id(&self) -> Option<&str> {
        self.won.cluster_id.as_deref()
    }

    /// The campaign's whole answer.
    pub fn campaigned(&self) -> &Campaigned {
        &self.won
    }

    /// The guard for a fenced write: applied only while this leadership is current.
    pub fn fence(&self) -> Fence {
        Fence {
            lock: self.won.name.clone(),
            token: self.won.token,
        }
    }

    /// Fires when the session is lost or the leadership ended: stop acting as leader.
    pub fn lost(&self) -> Lost {
        self.lost.clone()
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Publishes a new value. [`Error::NotLeader`] means the leadership has ended (the lost
    /// signal fires then too).
    pub async fn proclaim(&mut self, value: &str) -> Result<Written, Error> {
        let w = &self.won;
        let req = self
            .session
            .client()
            .prepare_proclaim(&w.name, w.lease_id, w.token, value);
        match self.session.client().send(&req).await {
            Ok(written) => {
                self.won.value = value.to_string();
                Ok(written)
            }
            Err(e @ Error::NotLeader { .. }) => {
                self.lost_tx.fire(LostReason::LeadershipEnded);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Steps down now; the next campaigner leads from the resigning entry.
    pub async fn resign(mut self) -> Result<Written, Error> {
        self.resigned = true;
        self.lost_tx.fire(LostReason::LeadershipEnded);
        let w = &self.won;
        let req = self
            .session
            .client()
            .prepare_resign(&w.name, w.lease_id, w.token);
        self.session.client().send(&req).await
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.watcher.abort();
        if self.resigned {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.session.client().clone();
        let w = self.won.clone();
        rt.spawn(async move {
            let req = client.prepare_resign(&w.name, w.lease_id, w.token);
            if let Err(e) = client.send(&req).await {
                tracing::debug!(election = %w.name, token = w.token, error = %e, "resign on drop failed");
            }
        });
    }
}

/// Pause before watching again after a watch ended with an error (compacted history, a
/// refusal), so an unreachable or refusing cluster is not asked in a tight loop.
const REWATCH_PAUSE_MS: u64 = 1_000;

/// Fires `tx` when the session is lost or the election's events show this token's
/// leadership ended. Watches from the winning entry, so nothing after it is missed; if the
/// watch ends (history compacted past that point, a refusal), asks for the leader instead and
/// watches on from now. An end between that read and the new watch's start is missed by the
/// watch; the session's signal and a refused proclaim still tell.
async fn watch_for_end(client: Client, session_lost: Lost, won: Campaigned, tx: LostSender) {
    let election = client.election(&won.name);
    let ended = async {
        let mut from = won.revision;
        loop {
            let mut events = election.observe(from);
            while let Some(e) = events.next().await {
                match e {
                    Ok(e) if e.kind == crate::EventKind::ElectionResigned => {
                        if e.token() == Some(won.token) {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(err) => {
                        tracing::debug!(election = %won.name, error = %err, "leadership watch ended");
                        break;
                    }
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(REWATCH_PAUSE_MS)).await;
            let still = election.get().await.ok().map(|i| {
                i.leader
                    .is_some_and(|l| l.token == Some(won.token) && l.lease_id == Some(won.lease_id))
            });
            if still == Some(false) {
                return;
            }
            from = 0;
        }
    };
    tokio::select! {
        reason = session_lost.wait() => tx.fire(reason),
        () = ended => tx.fire(LostReason::LeadershipEnded),
    }
}
