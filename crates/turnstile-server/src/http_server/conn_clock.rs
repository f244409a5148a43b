//! The clock of one HTTP connection: which phase it is in and when that phase must end. A
//! connection is reading a request head (from its accept, or from the first byte after an idle
//! time), serving a request (no deadline: responses may be long), or idle between requests.
//! [`ClockedIo`](super::clocked_io::ClockedIo) reports bytes arriving, the connection's service
//! (`conn_service.rs`) reports requests starting and their responses ending, and
//! [`ConnClock::enforce`] drops the connection when a deadline passes.
//!
//! The phases follow Go's `net/http` (`ReadHeaderTimeout`, `IdleTimeout`): the head clock runs
//! from the accept for a new connection, because a client that connects and says nothing is
//! holding a slot for nothing, and from the first byte for a kept-alive one, because waiting for
//! the next request is the idle clock's business.

use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The phase whose deadline closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// The request head did not arrive whole within the header read timeout.
    Header,
    /// No new request within the idle timeout.
    Idle,
}

impl Expired {
    /// The metric label and log field.
    pub fn as_str(self) -> &'static str {
        match self {
            Expired::Header => "header",
            Expired::Idle => "idle",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for or reading a request head since `since`.
    Head { since: Instant },
    /// `requests` requests started whose responses have not ended. hyper serves one request
    /// of a connection at a time, so this is 1; a count keeps the phase right whichever of
    /// "previous response dropped" and "next request started" hyper happens to do first.
    Busy { requests: u32 },
    /// The last response ended at `since`; no byte of a next request yet.
    Idle { since: Instant },
}

/// One connection's phase and deadlines.
#[derive(Debug)]
pub struct ConnClock {
    header_read_timeout: Duration,
    idle_timeout: Duration,
    phase: Mutex<Phase>,
    /// Wakes [`ConnClock::enforce`] when the phase changes, since its deadline may move closer.
    changed: Notify,
}

impl ConnClock {
    /// The clock of a connection accepted now: its head clock runs.
    pub fn new(header_read_timeout: Duration, idle_timeout: Duration) -> ConnClock {
        ConnClock {
            header_read_timeout,
            idle_timeout,
            phase: Mutex::new(Phase::Head {
                since: Instant::now(),
            }),
            changed: Notify::new(),
        }
    }

    /// Bytes arrived: on an idle connection they start a head, and the head clock.
    pub fn bytes_read(&self) {
        self.update(|phase| match phase {
            Phase::Idle { .. } => Phase::Head {
                since: Instant::now(),
            },
            other => other,
        });
    }

    /// A request head arrived whole and its handler is starting.
    pub fn request_started(&self) {
        self.update(|phase| match phase {
            Phase::Busy { requests } => Phase::Busy {
                requests: requests.saturating_add(1),
            },
            Phase::Head { .. } | Phase::Idle { .. } => Phase::Busy { requests: 1 },
        });
    }

    /// A response ended (sent whole, or dropped): with none left, the idle clock starts.
    pub fn request_finished(&self) {
        self.update(|phase| match phase {
            Phase::Busy { requests } if requests > 1 => Phase::Busy {
                requests: requests - 1,
            },
            _ => Phase::Idle {
                since: Instant::now(),
            },
        });
    }

    /// Runs `conn` (the connection's future) until it ends, or until the deadline of the
    /// phase it is in passes; then drops it, which closes the socket.
    pub async fn enforce<F: Future>(&self, conn: F) -> Result<F::Output, Expired> {
        let mut conn = std::pin::pin!(conn);
        loop {
            let deadline = self.deadline();
            let expiry = async {
                match deadline {
                    Some((at, _)) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                out = &mut conn => return Ok(out),
                () = self.changed.notified() => {}
                () = expiry => {
                    // Re-read: the phase may have moved on since the deadline was taken.
                    if let Some((at, expired)) = self.deadline() {
                        if at <= Instant::now() {
                            return Err(expired);
                        }
                    }
                }
            }
        }
    }

    /// When the current phase ends, and which it is; `None` while a request is served.
    fn deadline(&self) -> Option<(Instant, Expired)> {
        match *self.phase.lock().unwrap_or_else(PoisonError::into_inner) {
            Phase::Head { since } => Some((since + self.header_read_timeout, Expired::Header)),
            Phase::Idle { since } => Some((since + self.idle_timeout, Expired::Idle)),
            Phase::Busy { .. } => None,
        }
    }

    fn update(&self, f: impl FnOnce(Phase) -> Phase) {
        // A poisoned lock still holds a whole `Phase` (it is `Copy`, written in one store).
        let mut phase = self.phase.lock().unwrap_or_else(PoisonError::into_inner);
        let next = f(*phase);
        if next != *phase {
            *phase = next;
            drop(phase);
            self.changed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real time (this crate's tests do not build tokio's paused clock): deadlines are short,
    // and each check allows `SLACK` for a busy machine. A deadline never fires early.
    const HEADER: Duration = Duration::from_millis(200);
    const IDLE: Duration = Duration::from_millis(500);
    const SLACK: Duration = Duration::from_millis(400);

    /// Runs a connection that never ends under `clock`; says when and why it was cut.
    async fn cut(clock: &ConnClock) -> (Duration, Expired) {
        let started = Instant::now();
        let expired = clock
            .enforce(std::future::pending::<()>())
            .await
            .expect_err("a pending connection only ends by a deadline");
        (started.elapsed(), expired)
    }

    fn within(elapsed: Duration, want: Duration) -> bool {
        elapsed >= want && elapsed <= want + SLACK
    }

    #[tokio::test]
    async fn a_silent_new_connection_gets_the_header_timeout() {
        let clock = ConnClock::new(HEADER, IDLE);
        let (after, expired) = cut(&clock).await;
        assert_eq!(expired, Expired::Header);
        assert!(within(after, HEADER), "{after:?}");
    }

    #[tokio::test]
    async fn an_idle_connection_gets_the_idle_timeout() {
        let clock = ConnClock::new(HEADER, IDLE);
        clock.request_started();
        clock.request_finished();
        let (after, expired) = cut(&clock).await;
        assert_eq!(expired, Expired::Idle);
        assert!(within(after, IDLE), "{after:?}");
    }

    /// A trickle after an idle time: the head clock starts at the first byte and later bytes
    /// do not restart it.
    #[tokio::test]
    async fn a_head_trickled_after_an_idle_time_gets_the_header_timeout_from_its_first_byte() {
        let clock = ConnClock::new(HEADER, IDLE);
        clock.request_started();
        clock.request_finished();
        let first_byte_after = Duration::from_millis(300);
        let trickle = async {
            tokio::time::sleep(first_byte_after).await;
            clock.bytes_read();
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                clock.bytes_read();
            }
        };
        let (after, expired) = tokio::select! {
            c = cut(&clock) => c,
            () = trickle => unreachable!("the trickle never ends"),
        };
        assert_eq!(expired, Expired::Header);
        assert!(within(after, first_byte_after + HEADER), "{after:?}");
    }

    #[tokio::test]
    async fn a_request_being_served_has_no_deadline() {
        let clock = ConnClock::new(HEADER, IDLE);
        clock.request_started();
        let served_for = IDLE * 2;
        let started = Instant::now();
        assert!(clock.enforce(tokio::time::sleep(served_for)).await.is_ok());
        assert!(started.elapsed() >= served_for);
    }

    #[tokio::test]
    async fn overlapping_requests_stay_busy_until_the_last_ends() {
        let clock = ConnClock::new(HEADER, IDLE);
        clock.request_started();
        clock.request_started();
        clock.request_finished();
        assert_eq!(clock.deadline(), None);
        clock.request_finished();
        assert!(matches!(clock.deadline(), Some((_, Expired::Idle))));
    }
}
