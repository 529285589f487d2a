//! One module per subcommand.

pub mod consume;
pub mod serve;
pub mod status;
