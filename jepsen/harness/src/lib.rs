//! The chaos harness: real Turnstile node processes in network namespaces (`netns`,
//! `cluster`) or, as a second backend, in Docker containers (`docker`), cut off by the same
//! nftables rules (`nft`); a lock-holding client process tests can freeze or cut off
//! (`holder`), seeded client workloads and watchers (`workload`, `watcher`) talking HTTP
//! (`http`) over TLS with the run's certificates (`tls`), a seeded nemesis (`nemesis`), the recorder of the history (`recorder`), and the
//! run that ties them together and checks the result (`run`). The checkers live in
//! `turnstile-checker`.

pub mod cluster;
pub mod docker;
pub mod etcd_workload;
pub mod holder;
pub mod http;
pub mod nemesis;
pub mod netns;
pub mod nft;
pub mod owners;
pub mod recorder;
pub mod run;
pub mod tls;
pub mod watcher;
pub mod workload;
