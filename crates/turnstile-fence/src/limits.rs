//! Hard limits of the fence and the example ledger, units last in the names. Every limit
//! bounds memory that a client could otherwise grow without end.

/// Most resources one [`crate::Fence`] tracks, and the default. A fence never forgets a
/// resource (forgetting its highest token would let a stale holder back in), so past this a
/// new resource is refused with [`crate::FenceError::TooManyResources`] rather than evicting.
pub const RESOURCES_TRACKED_MAX: usize = 100_000;
/// Longest resource name, in bytes of UTF-8.
pub const RESOURCE_NAME_BYTES_MAX: usize = 512;
/// Longest lock name, in bytes (Turnstile's own lock-name limit).
pub const LOCK_NAME_BYTES_MAX: usize = 256;
/// Longest `cluster_id`, in bytes (Turnstile's are 32 hex characters).
pub const CLUSTER_ID_BYTES_MAX: usize = 128;
/// Largest `|amount|` of one ledger `add`, and largest `|balance|` of one ledger `set`.
pub const LEDGER_AMOUNT_ABS_MAX: i64 = 1 << 53;
/// Largest request body the ledger reads, in bytes.
pub const LEDGER_BODY_BYTES_MAX: usize = 16 * 1024;
/// Longest ledger account name, in bytes of UTF-8.
pub const LEDGER_ACCOUNT_NAME_BYTES_MAX: usize = 256;
/// Most ledger accounts. In fenced mode the fence's own limit applies as well.
pub const LEDGER_ACCOUNTS_MAX: usize = 100_000;
