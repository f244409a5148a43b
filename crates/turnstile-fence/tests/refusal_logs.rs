//! A refused access is logged at WARN with its fields. Alone in its own test binary on
//! purpose: tracing caches each callsite's "interest" process-wide, and a callsite first hit
//! by a concurrent test thread with no subscriber can stay cached as "not interested" while
//! this test installs its scoped one (about one run in three lost the first event when this
//! test shared a binary with the other fence tests).

use std::sync::{Arc, Mutex};

use turnstile_fence::{Fence, FenceToken};

fn tok(token: u64) -> FenceToken {
    FenceToken::new("c0ffee", "lock-a", token)
}

#[test]
fn refusals_are_logged_at_warn_with_fields() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let subscriber = capture::subscriber(Arc::clone(&events));
    tracing::subscriber::with_default(subscriber, || {
        let fence = Fence::new();
        let _ = fence.write("acct", &tok(11), || ());
        let _ = fence.write("acct", &tok(10), || ());
        let _ = fence.read("acct", &tok(9), || ());
    });
    let events = events.lock().expect("test mutex not poisoned");
    assert_eq!(events.len(), 2, "one event per refusal: {events:?}");
    let write = &events[0];
    assert_eq!(write.level, tracing::Level::WARN);
    assert_eq!(write.field("message"), Some("fenced write rejected"));
    assert_eq!(write.field("resource"), Some("acct"));
    assert_eq!(write.field("token"), Some("10"));
    assert_eq!(write.field("highest"), Some("11"));
    assert_eq!(write.field("reason"), Some("stale"));
    assert_eq!(events[1].field("message"), Some("fenced read rejected"));
}

/// A minimal tracing subscriber that keeps every event's level and fields.
mod capture {
    use std::fmt;
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

    #[derive(Debug)]
    pub struct Event {
        pub level: tracing::Level,
        pub fields: Vec<(String, String)>,
    }

    impl Event {
        pub fn field(&self, name: &str) -> Option<&str> {
            self.fields
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        }
    }

    struct Fields<'a>(&'a mut Vec<(String, String)>);

    impl Visit for Fields<'_> {
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.push((field.name().into(), value.into()));
        }
        fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
            self.0.push((field.name().into(), format!("{value:?}")));
        }
    }

    struct Capture(Arc<Mutex<Vec<Event>>>);

    impl<S: tracing::Subscriber> Layer<S> for Capture {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            let mut fields = Vec::new();
            event.record(&mut Fields(&mut fields));
            let level = *event.metadata().level();
            self.0
                .lock()
                .expect("capture not poisoned")
                .push(Event { level, fields });
        }
    }

    pub fn subscriber(events: Arc<Mutex<Vec<Event>>>) -> impl tracing::Subscriber {
        tracing_subscriber::registry().with(Capture(events))
    }
}
