//! `turnstile counter get|incr NAME`: the replicated sequence counters (`/v1/counters`). An
//! increment is one Raft entry, retried with one `request_id`, so a retry after an unknown
//! outcome never counts twice.

use clap::Subcommand;

use crate::client_cmd::{print_json, refused, ClientArgs};

#[derive(Subcommand, Debug)]
pub enum CounterCmd {
    /// Print a counter's value (0 if it was never incremented).
    Get { name: String },
    /// Add to a counter and print the new value.
    Incr {
        name: String,
        /// Amount to add; negative to subtract.
        #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
        by: i64,
    },
}

pub async fn run(args: &ClientArgs, cmd: CounterCmd) -> anyhow::Result<i32> {
    let client = args.client()?;
    match cmd {
        CounterCmd::Get { name } => match client.counter(&name).await {
            Ok(value) if args.json => {
                print_json(&serde_json::json!({"name": name, "value": value})).map(|()| 0)
            }
            Ok(value) => {
                println!("{value}");
                Ok(0)
            }
            Err(e) => refused(e),
        },
        CounterCmd::Incr { name, by } => match client.incr(&name, by).await {
            Ok(v) if args.json => print_json(&v).map(|()| 0),
            Ok(v) => {
                println!("{}", v.value);
                Ok(0)
            }
            Err(e) => refused(e),
        },
    }
}
