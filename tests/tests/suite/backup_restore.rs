//! Backup and restore end to end: a backup taken from a live cluster seeds a new 3-node
//! cluster that has the locks, keys and counters, a new `cluster_id` (the same on every new
//! node), and grants tokens above the backup's last index. Restores that could confuse the
//! two clusters or clobber data are refused.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::bail;
use serde_json::json;
use turnstile_server::backup::{self, RestoreError, RestorePlan};
use turnstile_tests::{token, Cluster};

fn plan(
    backup: &Path,
    dir: PathBuf,
    id: u64,
    addrs: BTreeMap<u64, SocketAddr>,
    cluster_id: &str,
) -> RestorePlan {
    RestorePlan {
        backup: backup.to_path_buf(),
        data_dir: dir,
        node_id: id,
        initial_cluster: addrs,
        cluster_id: cluster_id.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_restores_into_a_new_cluster() -> anyhow::Result<()> {
    let a = Cluster::start(3).await?;
    let leader = a.leader().await?;
    let lease = a.lease(leader, 60_000).await?;
    let (code, v) = a.acquire(leader, "held", lease).await?;
    assert_eq!(code, 200, "{v}");
    let held_token = token(&v)?;
    let old_cluster_id = v["cluster_id"].as_str().unwrap_or_default().to_string();
    let (code, v) = a
        .call(
            leader,
            reqwest::Method::PUT,
            "/v1/kv/config",
            Some(json!({"value": "v1"})),
        )
        .await?;
    assert_eq!(code, 200, "{v}");
    let (code, v) = a
        .post(leader, "/v1/counters/jobs/incr", json!({"by": 7}))
        .await?;
    assert_eq!(code, 200, "{v}");

    // Only the leader serves a backup; followers send the client on.
    let mut file = None;
    for id in a.running() {
        let (code, bytes) = a.get_bytes(id, "/v1/admin/backup").await?;
        match code {
            200 => file = Some(bytes),
            503 => assert_ne!(id, leader),
            other => bail!("backup from node {id}: {other}"),
        }
    }
    let Some(bytes) = file else {
        bail!("no node served a backup")
    };
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("cluster.backup");
    std::fs::write(&path, &bytes)?;
    let backup_index = backup::BackupFile::read(&path)?.last_index();
    a.shutdown().await;

    // Refusals: the old cluster id, and a dir with data in it.
    let addrs: BTreeMap<u64, SocketAddr> = BTreeMap::from([(1, "127.0.0.1:1".parse()?)]);
    let same = plan(
        &path,
        dir.path().join("x"),
        1,
        addrs.clone(),
        &old_cluster_id,
    );
    assert!(matches!(
        backup::restore(&same).await,
        Err(RestoreError::SameClusterId(_))
    ));
    let busy = dir.path().join("busy");
    std::fs::create_dir_all(&busy)?;
    std::fs::write(busy.join("keep.me"), b"data")?;
    let into_busy = plan(&path, busy.clone(), 1, addrs, "fresh");
    assert!(matches!(
        backup::restore(&into_busy).await,
        Err(RestoreError::DirNotEmpty { .. })
    ));
    assert_eq!(std::fs::read(busy.join("keep.me"))?, b"data");

    // Restore every node of a new cluster from the file, with one new cluster id.
    let new_id = backup::new_cluster_id();
    let b = Cluster::start_seeded(3, |id, data_dir, addrs| {
        let p = plan(&path, data_dir, id, addrs, &new_id);
        async move {
            let restored = backup::restore(&p).await?;
            assert_eq!(restored.last_index, backup_index);
            Ok(())
        }
    })
    .await?;
    let leader = b.leader().await?;
    for id in b.running() {
        let s = b.status(id).await?;
        assert_eq!(s["cluster_id"], new_id.as_str(), "{s}");
    }
    assert_ne!(new_id, old_cluster_id);

    let (code, v) = b.get(leader, "/v1/locks/held").await?;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["holders"][0]["lease_id"], lease, "{v}");
    assert_eq!(v["holders"][0]["token"], held_token, "{v}");
    let (code, v) = b.get(leader, "/v1/kv/config").await?;
    assert_eq!((code, v["value"].as_str()), (200, Some("v1")), "{v}");
    let (code, v) = b.get(leader, "/v1/counters/jobs").await?;
    assert_eq!((code, v["value"].as_i64()), (200, Some(7)), "{v}");

    // New grants carry the new cluster id and tokens above everything the backup knew.
    let lease_b = b.lease(leader, 60_000).await?;
    let (code, v) = b.acquire(leader, "after-restore", lease_b).await?;
    assert_eq!(code, 200, "{v}");
    assert!(
        token(&v)? > backup_index,
        "token {v} not above {backup_index}"
    );
    assert_eq!(v["cluster_id"], new_id.as_str());
    // The old holder's token is not current for the new cluster's id... and a check naming
    // the old cluster is not confused with it.
    let (code, v) = b
        .post(
            leader,
            "/v1/fence/check",
            json!({"name": "held", "token": held_token, "cluster_id": old_cluster_id}),
        )
        .await?;
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v["current"], false,
        "a token of the old cluster passed: {v}"
    );
    b.converged().await?;
    b.shutdown().await;
    Ok(())
}
