//! The integration suites against in-process clusters and real processes, one module per
//! suite, linked as one test executable (each executable costs CI a link of every dependency).

mod auth;
mod backup_restore;
mod bad_input;
mod client;
mod container_image;
mod dashboard;
mod elections;
mod etcd_port;
mod etcd_recipes;
mod etcd_same_as_etcd;
mod etcd_watch;
mod failover;
mod hostile_peers;
mod hot_lock;
mod idempotency;
mod lease_time;
mod locks;
mod membership;
mod metrics;
mod minority;
mod prevote;
mod proposals;
mod queues;
mod ranges;
mod restart;
mod tls;
mod txn;
mod watch;
mod wiped_node;
