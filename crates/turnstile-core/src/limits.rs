//! Hard limits, named with their units last. The API validates requests against these before
//! proposing, and `apply` re-checks the ones that guard state size, so a bad entry can never
//! grow the state without bound. `docs/api.md` lists every one of them.

/// Shortest lease TTL. Below about two election timeouts a lease could expire during an
/// ordinary leader change.
pub const TTL_MS_MIN: u64 = 1_000;
/// Longest lease TTL (one hour).
pub const TTL_MS_MAX: u64 = 3_600_000;
/// Longest key, in bytes of UTF-8.
pub const KEY_BYTES_MAX: usize = 512;
/// Largest value, in bytes. Far below sled's ~128 KiB blob threshold so no log entry that
/// carries a value ever lands in sled's unsynced `blobs/` directory.
pub const VALUE_BYTES_MAX: usize = 64 * 1024;
/// Longest lock name, in bytes.
pub const LOCK_NAME_BYTES_MAX: usize = 256;
/// Longest counter name, in bytes.
pub const COUNTER_NAME_BYTES_MAX: usize = 256;
/// Longest client-chosen `request_id`, in bytes.
pub const REQUEST_ID_BYTES_MAX: usize = 128;
/// Most leases renewed by one keepalive entry.
pub const KEEPALIVE_LEASES_PER_ENTRY_MAX: usize = 1_024;
/// Most leases named by one `Expire` entry.
pub const EXPIRE_LEASES_PER_ENTRY_MAX: usize = 1_024;
/// How long a request-id record outlives its request once the request is finished (answered,
/// and no longer holding or waiting for a lock): a retry within this window gets the first
/// outcome; after it, the id may act again. A client that acknowledges the answer (`Ack`)
/// lets the record go at once.
pub const REQUEST_RECORD_WINDOW_MS: u64 = 10 * 60 * 1_000;
/// Most request ids one `Ack` entry names.
pub const ACKS_PER_ENTRY_MAX: usize = 4_096;
/// Most leases alive at once; a grant past it fails with `limit_reached`.
pub const LEASES_MAX: usize = 1_000_000;
/// Most keys stored at once.
pub const KEYS_MAX: usize = 1_000_000;
/// Most counters stored at once.
pub const COUNTERS_MAX: usize = 1_000_000;
/// Most locks one lease may hold at once.
pub const LOCKS_PER_LEASE_MAX: usize = 10_000;
/// Most request-id records kept at once; a request with a new id past it is refused with
/// `limit_reached` rather than acting without a record (which would break idempotency).
pub const REQUEST_RECORDS_MAX: usize = 1_000_000;
/// Largest `|by|` of one counter increment.
pub const COUNTER_STEP_ABS_MAX: i64 = 1 << 53;
/// Most waiters queued on one lock; an acquire past it fails with `limit_reached`.
pub const WAITERS_PER_LOCK_MAX: usize = 10_000;
/// Most locks in one `acquire-many`.
pub const LOCKS_PER_ACQUIRE_MAX: usize = 64;
/// Largest semaphore (`permits`).
pub const PERMITS_MAX: u32 = 10_000;
/// Watch events retained in the replicated history; a watch starting before the oldest gets
/// `compacted`.
pub const WATCH_HISTORY_EVENTS_MAX: usize = 10_000;
/// Longest election name, in bytes: an election is the lock of the same name.
pub const ELECTION_NAME_BYTES_MAX: usize = LOCK_NAME_BYTES_MAX;
/// Largest value an election candidate publishes, in bytes: the same bound as a key's value,
/// for the same reason (it travels in one log entry).
pub const ELECTION_VALUE_BYTES_MAX: usize = VALUE_BYTES_MAX;
/// Most campaigns (leaders and queued candidates, all elections) stored at once; a campaign
/// past it fails with `limit_reached`.
pub const CAMPAIGNS_MAX: usize = 1_000_000;
/// Most compares in one transaction.
pub const TXN_COMPARES_MAX: usize = 64;
/// Most operations in one branch (`success` or `failure`) of a transaction.
pub const TXN_OPS_PER_BRANCH_MAX: usize = 64;
/// Ranges (etcd's `Range` inside a `Txn`) one branch may read ...
pub const TXN_RANGES_PER_BRANCH_MAX: usize = 8;
/// ... looking at most at this many keys together (they are read at apply) ...
pub const TXN_RANGE_SCAN_MAX: usize = 10_000;
/// ... each answering at most this many keys ...
pub const TXN_RANGE_ITEMS_MAX: usize = 1_000;
/// ... and about this many bytes of keys and values (at least one key).
pub const TXN_RANGE_BYTES_MAX: usize = 512 * 1024;
/// Most bytes of names and values (keys, values, lock and counter names) one transaction
/// carries, over its compares and both branches. Like `VALUE_BYTES_MAX`, it keeps the whole
/// log entry under sled's ~128 KiB blob threshold: one full-size value plus room for names.
pub const TXN_PAYLOAD_BYTES_MAX: usize = VALUE_BYTES_MAX + 16 * 1024;
