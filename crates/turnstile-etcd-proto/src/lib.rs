//! etcd's v3 gRPC API: the messages and the server traits of its services (KV, Watch, Lease,
//! Cluster, Maintenance, Auth, Lock, Election), as Turnstile's etcd port implements them
//! (`turnstile_server::etcd`).
//!
//! The Rust code in `src/gen/` is generated from `proto/` by `regen.sh` and checked in, so a
//! build needs no `protoc` and no code generator. `PROTO_SHA256` (re-exported below) is the
//! hash of the proto files the code was made from; turnstile-server's unit tests fail when the
//! files no longer match it.

/// etcd's own services and messages (`package etcdserverpb`).
#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used, missing_docs)]
pub mod etcdserverpb {
    include!("gen/etcdserverpb.rs");
}

/// Keys and watch events (`package mvccpb`).
#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used, missing_docs)]
pub mod mvccpb {
    include!("gen/mvccpb.rs");
}

/// Users, roles and permissions (`package authpb`).
#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used, missing_docs)]
pub mod authpb {
    include!("gen/authpb.rs");
}

/// The lock service (`package v3lockpb`).
#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used, missing_docs)]
pub mod v3lockpb {
    include!("gen/v3lockpb.rs");
}

/// The election service (`package v3electionpb`).
#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used, missing_docs)]
pub mod v3electionpb {
    include!("gen/v3electionpb.rs");
}

/// SHA-256 (hex) of the proto files `src/gen/` was generated from, in [`PROTO_FILES`] order.
pub const PROTO_SHA256: &str = include_str!("gen/PROTO_SHA256");

/// The proto files under `proto/`, in the order their hash is taken (as `codegen/` does).
pub const PROTO_FILES: [&str; 5] = [
    "auth.proto",
    "kv.proto",
    "rpc.proto",
    "v3election.proto",
    "v3lock.proto",
];
