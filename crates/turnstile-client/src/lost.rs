//! [`Lost`]: the signal a [`crate::Session`] fires once its lease can no longer be trusted to
//! be alive. It fires once, with the first reason; every clone sees it.

use std::sync::Arc;

use tokio::sync::watch;

/// Why a session was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostReason {
    /// The cluster answered definitely that the lease is gone (expired or revoked).
    LeaseNotFound,
    /// The local deadline passed without a confirmed keepalive: the lease may have expired.
    DeadlinePassed,
    /// The session was closed or dropped.
    Closed,
    /// The election's leadership ended while the session lived on (observed on the watch:
    /// resigned, or its grant withdrawn). Only a [`crate::Leadership`]'s signal fires this.
    LeadershipEnded,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostReason::LeaseNotFound => "the lease is gone (lease_not_found)",
            LostReason::DeadlinePassed => {
                "no keepalive was confirmed before the local deadline; the lease may have expired"
            }
            LostReason::Closed => "the session was closed",
            LostReason::LeadershipEnded => "the leadership ended",
        })
    }
}

/// The sending half, held by the session and its keepalive task.
#[derive(Debug, Clone)]
pub(crate) struct LostSender(Arc<watch::Sender<Option<LostReason>>>);

impl LostSender {
    pub(crate) fn new() -> (LostSender, Lost) {
        let (tx, rx) = watch::channel(None);
        (LostSender(Arc::new(tx)), Lost { rx })
    }

    /// Fires the signal; a signal already fired keeps its first reason.
    pub(crate) fn fire(&self, reason: LostReason) {
        self.0.send_if_modified(|v| {
            if v.is_some() {
                return false;
            }
            if reason == LostReason::Closed {
                tracing::debug!(%reason, "session ended");
            } else {
                tracing::warn!(%reason, "session lost");
            }
            *v = Some(reason);
            true
        });
    }
}

/// A session's lost signal: wait on it, or poll it. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Lost {
    rx: watch::Receiver<Option<LostReason>>,
}

impl Lost {
    /// The reason, if the signal has fired.
    pub fn reason(&self) -> Option<LostReason> {
        *self.rx.borrow()
    }

    pub fn is_lost(&self) -> bool {
        self.reason().is_some()
    }

    /// Resolves when the signal fires (at once if it has). A session whose keepalive task is
    /// gone without firing counts as closed.
    pub async fn wait(&self) -> LostReason {
        let mut rx = self.rx.clone();
        loop {
            if let Some(r) = *rx.borrow_and_update() {
                return r;
            }
            if rx.changed().await.is_err() {
                return rx.borrow().unwrap_or(LostReason::Closed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fires_once_with_the_first_reason() {
        let (tx, lost) = LostSender::new();
        assert!(!lost.is_lost());
        let waiter = tokio::spawn({
            let lost = lost.clone();
            async move { lost.wait().await }
        });
        tx.fire(LostReason::LeaseNotFound);
        tx.fire(LostReason::Closed);
        assert_eq!(waiter.await.ok(), Some(LostReason::LeaseNotFound));
        assert_eq!(lost.reason(), Some(LostReason::LeaseNotFound));
    }

    #[tokio::test]
    async fn a_dropped_sender_reads_as_closed() {
        let (tx, lost) = LostSender::new();
        drop(tx);
        assert_eq!(lost.wait().await, LostReason::Closed);
    }
}
