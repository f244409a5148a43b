//! etcd's v3 gRPC API: the messages and the server traits of its services (KV, Watch, Lease,
//! Cluster, Maintenance, Auth, Lock, Election), as Turnstile's etcd port implements them
//! (`turnstile_server::etcd`).
//!
//! The Rust code in `src/gen/` is generated from `proto/` by `regen.sh` and checked in, so a
//! build needs no `protoc` and no code generator. The test below fails when a proto file no
//! longer matches the hash the code was generated from.

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

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    /// Same files, same order as `codegen/src/main.rs`.
    const PROTOS: [&str; 5] = [
        "auth.proto",
        "kv.proto",
        "rpc.proto",
        "v3election.proto",
        "v3lock.proto",
    ];

    #[test]
    fn generated_code_matches_the_proto_files() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut hash = Sha256::new();
        for p in PROTOS {
            let bytes = std::fs::read(dir.join("proto").join(p)).expect("read a proto file");
            hash.update(bytes);
        }
        let recorded = include_str!("gen/PROTO_SHA256").trim();
        assert_eq!(
            hex::encode(hash.finalize()),
            recorded,
            "proto/ changed since src/gen/ was generated: run crates/turnstile-etcd-proto/regen.sh"
        );
    }
}
