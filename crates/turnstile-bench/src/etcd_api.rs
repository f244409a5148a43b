//! `EtcdApi`: the etcd v3 calls the workloads make, through the `etcd-client` crate: leases,
//! etcd's own lock service (v3lock `Lock`/`Unlock` with a lease), a compare-and-set
//! transaction, puts and watches. Cloning shares the underlying HTTP/2 connection, which is
//! plain or TLS with a client certificate (`EtcdTls`).

use std::time::Duration;

use anyhow::{bail, Context};
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, Identity, LeaseKeepAliveStream,
    LeaseKeeper, LockOptions, TlsOptions, Txn, TxnOp, WatchStream,
};

use crate::cluster_certs::ClusterCerts;

use crate::plan::REQUEST_MS_MAX;

/// Calls to etcd through one client connection.
#[derive(Clone)]
pub struct EtcdApi {
    client: Client,
}

/// A held etcd lock: the key `Lock` created (the owner key `name/<lease>`), and its revision.
#[derive(Clone, Debug)]
pub struct EtcdHeld {
    pub key: Vec<u8>,
    pub revision: i64,
}

/// What `Status` says about one member.
#[derive(Clone, Copy, Debug)]
pub struct EtcdStatus {
    pub member_id: u64,
    pub leader: u64,
    pub raft_term: u64,
    pub raft_applied_index: u64,
}

/// TLS settings of the client connections to a TLS cluster: only the cluster's CA is trusted
/// (tonic is built without native or webpki roots), and the client certificate is presented
/// for etcd's `--client-cert-auth`. rustls runs on ring (etcd-client's `tls-ring`).
#[derive(Clone, Debug)]
pub struct EtcdTls(TlsOptions);

impl EtcdTls {
    pub fn from_certs(certs: &ClusterCerts) -> anyhow::Result<EtcdTls> {
        let (cert, key) = certs.client_pem()?;
        Ok(EtcdTls(
            TlsOptions::new()
                .ca_certificate(Certificate::from_pem(certs.ca_pem()?))
                .identity(Identity::from_pem(cert, key)),
        ))
    }
}

impl EtcdApi {
    /// Connects to the given endpoints (`http://127.0.0.1:port`, or `https://` with `tls`).
    pub async fn connect(endpoints: &[String], tls: Option<&EtcdTls>) -> anyhow::Result<EtcdApi> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_millis(REQUEST_MS_MAX));
        if let Some(tls) = tls {
            options = options.with_tls(tls.0.clone());
        }
        let client = Client::connect(endpoints, Some(options))
            .await
            .with_context(|| format!("cannot connect to etcd at {endpoints:?}"))?;
        Ok(EtcdApi { client })
    }

    /// Grants a lease of `ttl_ms` rounded up to whole seconds (etcd's unit).
    pub async fn lease_grant(&mut self, ttl_ms: u64) -> anyhow::Result<i64> {
        let ttl_s = i64::try_from(ttl_ms.div_ceil(1_000)).context("lease TTL too large")?;
        let resp = self.client.lease_grant(ttl_s, None).await?;
        Ok(resp.id())
    }

    pub async fn lease_revoke(&mut self, lease: i64) -> anyhow::Result<()> {
        self.client.lease_revoke(lease).await?;
        Ok(())
    }

    /// Opens a keepalive stream for `lease`; renew with [`EtcdApi::keepalive_once`].
    pub async fn keepalive_stream(
        &mut self,
        lease: i64,
    ) -> anyhow::Result<(LeaseKeeper, LeaseKeepAliveStream)> {
        Ok(self.client.lease_keep_alive(lease).await?)
    }

    /// One keepalive: a request on the stream and its answer.
    pub async fn keepalive_once(
        keeper: &mut LeaseKeeper,
        stream: &mut LeaseKeepAliveStream,
    ) -> anyhow::Result<()> {
        keeper.keep_alive().await?;
        match stream.message().await? {
            Some(resp) if resp.ttl() > 0 => Ok(()),
            Some(_) => bail!("lease {} not found", keeper.id()),
            None => bail!("keepalive stream closed"),
        }
    }

    /// etcd's lock service: blocks until `name` is held with `lease`.
    pub async fn lock(&mut self, name: &str, lease: i64) -> anyhow::Result<EtcdHeld> {
        let opts = LockOptions::new().with_lease(lease);
        let resp = self.client.lock(name, Some(opts)).await?;
        Ok(EtcdHeld {
            key: resp.key().to_vec(),
            revision: resp.header().map_or(0, |h| h.revision()),
        })
    }

    /// Unlock: deletes the owner key; returns the revision of the delete.
    pub async fn unlock(&mut self, held: &EtcdHeld) -> anyhow::Result<i64> {
        let resp = self.client.unlock(held.key.clone()).await?;
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// Compare-and-set: puts `value` if the key is absent (`expect: None`) or its mod_revision
    /// is `expect`; returns the new revision.
    pub async fn put_if(
        &mut self,
        key: &str,
        value: &str,
        expect: Option<i64>,
    ) -> anyhow::Result<i64> {
        let cmp = match expect {
            None => Compare::create_revision(key, CompareOp::Equal, 0),
            Some(rev) => Compare::mod_revision(key, CompareOp::Equal, rev),
        };
        let txn = Txn::new()
            .when([cmp])
            .and_then([TxnOp::put(key, value, None)]);
        let resp = self.client.txn(txn).await?;
        if !resp.succeeded() {
            bail!("compare failed on {key}");
        }
        resp.header()
            .map(|h| h.revision())
            .context("txn answer has no header")
    }

    pub async fn put(&mut self, key: &str, value: &str) -> anyhow::Result<i64> {
        let resp = self.client.put(key, value, None).await?;
        resp.header()
            .map(|h| h.revision())
            .context("put answer has no header")
    }

    /// Number of keys under `prefix` (a lock's owner keys: holder and waiters).
    pub async fn count_prefix(&mut self, prefix: &str) -> anyhow::Result<i64> {
        let opts = etcd_client::GetOptions::new()
            .with_prefix()
            .with_count_only();
        Ok(self.client.get(prefix, Some(opts)).await?.count())
    }

    /// Watches `key` and waits until etcd confirms the watch is created.
    pub async fn watch(&mut self, key: &str) -> anyhow::Result<WatchStream> {
        let mut stream = self.client.watch(key, None).await?;
        match stream.message().await? {
            Some(resp) if resp.created() => Ok(stream),
            Some(_) => bail!("watch on {key}: first answer is not `created`"),
            None => bail!("watch on {key}: stream closed"),
        }
    }

    pub async fn status(&mut self) -> anyhow::Result<EtcdStatus> {
        let s = self.client.status().await?;
        Ok(EtcdStatus {
            member_id: s.header().map_or(0, |h| h.member_id()),
            leader: s.leader(),
            raft_term: s.raft_term(),
            raft_applied_index: s.raft_applied_index(),
        })
    }
}
