//! One module per subcommand.

pub mod bench;
pub mod consume;
pub mod demo;
pub mod run;
pub mod runs;
pub mod serve;
pub mod sim;
pub mod stalls;
pub mod status;
pub mod trainer;
pub mod ui;
