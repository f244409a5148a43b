//! Label sets of the lock metrics, and [`NameCap`], which keeps the `name` label bounded: lock
//! names are client-chosen and unbounded, so a lock gets its own series only when the operator
//! asked for it (`--metrics-lock-names N`), and only the first N names seen do.

use std::collections::HashSet;
use std::fmt;

use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};

use super::books::LockKind;

/// The `name` value every lock past the cap shares.
pub const OTHER_NAME: &str = "_other";

/// `kind`, and `name` when lock-name labels are on. Without them the label is left out, not
/// set to "": the series stay exactly the per-kind aggregates.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockLabels {
    pub kind: LockKind,
    pub name: Option<String>,
}

/// How a hold or wait was lost without its holder letting go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpiryCause {
    /// The lease's TTL ran out.
    Ttl,
    /// The lease was revoked.
    Revoke,
    /// The wait was aborted to break a deadlock.
    DeadlockVictim,
}

impl ExpiryCause {
    pub fn as_str(self) -> &'static str {
        match self {
            ExpiryCause::Ttl => "ttl",
            ExpiryCause::Revoke => "revoke",
            ExpiryCause::DeadlockVictim => "deadlock_victim",
        }
    }
}

/// Whether what was lost was a hold or a queued wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lost {
    Held,
    Waiting,
}

impl Lost {
    pub fn as_str(self) -> &'static str {
        match self {
            Lost::Held => "held",
            Lost::Waiting => "waiting",
        }
    }
}

/// Labels of `turnstile_lock_expiries_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExpiryLabels {
    pub lock: LockLabels,
    pub cause: ExpiryCause,
    pub state: Lost,
}

/// Labels of `turnstile_request_replays_total`: the command kind (a fixed, small set).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CommandLabels {
    pub command: &'static str,
}

fn label(encoder: &mut LabelSetEncoder, key: &str, value: &str) -> fmt::Result {
    EncodeLabel::encode(&(key, value), encoder.encode_label())
}

impl EncodeLabelSet for LockLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        label(encoder, "kind", self.kind.as_str())?;
        match &self.name {
            Some(name) => label(encoder, "name", name),
            None => Ok(()),
        }
    }
}

impl EncodeLabelSet for ExpiryLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        EncodeLabelSet::encode(&self.lock, encoder)?;
        label(encoder, "cause", self.cause.as_str())?;
        label(encoder, "state", self.state.as_str())
    }
}

impl EncodeLabelSet for CommandLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        label(encoder, "command", self.command)
    }
}

/// Which lock names get their own `name` label value: the first `cap` distinct names seen
/// since the node started; every later one is [`OTHER_NAME`]. Each node admits names in the
/// order it applies them, so nodes started together agree; a restarted node may pick others.
#[derive(Debug, Default)]
pub struct NameCap {
    cap: usize,
    admitted: HashSet<String>,
}

impl NameCap {
    /// `cap` = 0 turns lock-name labels off.
    pub fn new(cap: usize) -> NameCap {
        NameCap {
            cap,
            admitted: HashSet::new(),
        }
    }

    /// The `name` label value for lock `name`, or `None` when lock-name labels are off.
    pub fn label(&mut self, name: &str) -> Option<String> {
        if self.cap == 0 {
            return None;
        }
        if self.admitted.contains(name) {
            return Some(name.to_string());
        }
        if self.admitted.len() < self.cap {
            self.admitted.insert(name.to_string());
            return Some(name.to_string());
        }
        Some(OTHER_NAME.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_names_are_admitted_and_the_rest_share_other() {
        let mut cap = NameCap::new(2);
        let seen: Vec<_> = ["a", "b", "c", "a", "d", "b"]
            .iter()
            .map(|n| cap.label(n))
            .collect();
        let want = ["a", "b", OTHER_NAME, "a", OTHER_NAME, "b"].map(|n| Some(n.to_string()));
        assert_eq!(seen, want);
    }

    #[test]
    fn cap_zero_means_no_name_label() {
        let mut cap = NameCap::new(0);
        assert_eq!(cap.label("a"), None);
    }

    #[test]
    fn a_label_set_without_a_name_encodes_only_its_kind() {
        use prometheus_client::encoding::text::encode;
        use prometheus_client::metrics::counter::Counter;
        use prometheus_client::metrics::family::Family;
        use prometheus_client::registry::Registry;

        let family = Family::<ExpiryLabels, Counter>::default();
        let lock = |name: Option<&str>| LockLabels {
            kind: LockKind::Shared,
            name: name.map(str::to_string),
        };
        for name in [None, Some("q\"x")] {
            let labels = ExpiryLabels {
                lock: lock(name),
                cause: ExpiryCause::Ttl,
                state: Lost::Held,
            };
            family.get_or_create(&labels).inc();
        }
        let mut registry = Registry::default();
        registry.register("e", "help", family);
        let mut text = String::new();
        encode(&mut text, &registry).expect("encodes");
        assert!(
            text.contains("e_total{kind=\"shared\",cause=\"ttl\",state=\"held\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "e_total{kind=\"shared\",name=\"q\\\"x\",cause=\"ttl\",state=\"held\"} 1\n"
            ),
            "{text}"
        );
    }
}
