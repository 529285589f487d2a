//! `batchcast ui`: serve the dashboard over a run store (batchcast-ui).

use std::net::IpAddr;

use super::runs::StoreArg;
use crate::out::outln;

/// Arguments of `batchcast ui`.
#[derive(Debug, clap::Args)]
pub struct UiArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// The port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8470)]
    pub port: u16,
    /// The address to listen on. Anything but loopback exposes the store
    /// to the network (the token then guards it).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Serve without the random token that every request needs by
    /// default (printed in the address; the browser keeps it in a cookie).
    /// Any local user can then read the store: commands, environments,
    /// output. Only with a loopback --host.
    #[arg(long)]
    pub no_token: bool,
}

/// Runs `batchcast ui` until interrupted.
pub fn run(args: UiArgs) -> anyhow::Result<()> {
    let store = args
        .store
        .store
        .clone()
        .unwrap_or_else(batchcast_runs::Store::default_path);
    // Say at once when the store cannot be read; the server still starts
    // (its pages say the same), so that a store written later is shown.
    if let Err(e) = batchcast_runs::Store::open_read_only(&store) {
        eprintln!("warning: {e}");
    }
    let config = batchcast_ui::UiConfig {
        host: args.host,
        token: !args.no_token,
        ..batchcast_ui::UiConfig::local(store, args.port)
    };
    let ui = batchcast_ui::Ui::bind(&config)?;
    if ui.token().is_some() && !args.host.is_loopback() {
        eprintln!(
            "warning: serving the run store on {} (not only this machine); every request needs the token in the address below",
            ui.addr()
        );
    }
    outln!("batchcast ui: {}", ui.url())?;
    use std::io::Write;
    let _ = std::io::stdout().flush();
    ui.run()?;
    Ok(())
}
