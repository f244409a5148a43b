//! Compiles `proto/*.proto` with protox (no `protoc` needed) and writes the server-side Rust
//! code tonic-prost-build makes from them to `src/gen/`, plus `src/gen/PROTO_SHA256`: the hash
//! of the proto files it was made from, which the crate's unit test checks, so an edited proto
//! without regenerated code fails the tests.

use std::path::PathBuf;

use sha2::{Digest, Sha256};

/// The proto files, in the order their hash is taken.
const PROTOS: [&str; 5] = [
    "auth.proto",
    "kv.proto",
    "rpc.proto",
    "v3election.proto",
    "v3lock.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let proto_dir = root.join("proto");
    let out = root.join("src/gen");
    let files: Vec<PathBuf> = PROTOS.iter().map(|p| proto_dir.join(p)).collect();
    let descriptors = protox::compile(&files, [&proto_dir])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        // Every RPC has a default answer, Unimplemented, which the etcd port's layer gives a
        // message naming the RPC; a service implements what it supports.
        .generate_default_stubs(true)
        .out_dir(&out)
        .compile_fds(descriptors)?;
    let mut hash = Sha256::new();
    for f in &files {
        hash.update(std::fs::read(f)?);
    }
    std::fs::write(out.join("PROTO_SHA256"), hex::encode(hash.finalize()) + "\n")?;
    println!("wrote {}", out.display());
    Ok(())
}
