//! Key spans (etcd's `Range`) live in `turnstile_core::key_span`, where a range inside a
//! transaction reads them at apply too; the read path's users (`leader_ops`, the etcd port)
//! name them here.

pub use turnstile_core::key_span::*;

use crate::views::KeyView;

impl From<SpanKey> for KeyView {
    fn from(k: SpanKey) -> KeyView {
        KeyView {
            key: k.key,
            value: k.value,
            create_revision: k.create_revision,
            mod_revision: k.mod_revision,
            version: k.version,
            lease_id: k.lease_id,
        }
    }
}
