//! `tensorport-loadgen`: see `--help`, and docs/BENCHMARKS.md for how `make bench` uses it.

use std::process::ExitCode;

use clap::Parser;
use tensorport_loadgen::config::Format;
use tensorport_loadgen::Config;

fn main() -> ExitCode {
    let config = Config::parse();
    // One thread: the generator should take one core and leave the others to the server.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("tensorport-loadgen: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(tensorport_loadgen::run(&config)) {
        Ok(report) => {
            match config.format {
                Format::Json => println!("{}", report.json_line()),
                Format::Table => print!("{}", report.table()),
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("tensorport-loadgen: {err}");
            ExitCode::FAILURE
        }
    }
}
