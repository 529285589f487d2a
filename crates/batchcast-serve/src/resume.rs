//! What makes `batchcast serve` resumable: the stream's identity, which a
//! restart must match, and the skipping of a resumed epoch's first rows.
//!
//! The order of an epoch is a function of (seed, epoch) and augmentation
//! draws are seeded per sample, so a restarted producer given the same
//! dataset, seed and options re-creates the same epoch and starts it at
//! the resume point's row without decoding what lies before it.

use std::path::Path;

use crate::args::SourceArgs;

/// The identity of the stream `args` describes, as `key=value` lines: the
/// dataset (its path, and its size unless it grows: `--watch` and
/// `--replay` are expected to change it), the seed, and every other option
/// that changes the samples or their order (the number of workers does
/// not).
pub fn identity(args: &SourceArgs, samples_per_epoch: u64) -> String {
    let dataset = match (&args.data, &args.replay.replay) {
        (Some(path), _) | (None, Some(path)) if args.grows() => {
            format!("{} (growing)", canonical(path))
        }
        (Some(path), _) | (None, Some(path)) => {
            format!("{} ({samples_per_epoch} samples)", canonical(path))
        }
        (None, None) => format!("synthetic ({samples_per_epoch} samples)"),
    };
    let flags = args.to_flags();
    let mut options = Vec::new();
    let mut i = 0;
    while i < flags.len() {
        let flag = &flags[i];
        let takes_value = flags.get(i + 1).is_some_and(|next| !next.starts_with("--"));
        let skipped = matches!(
            flag.as_str(),
            "--workers" | "--data" | "--replay" | "--seed"
        );
        if !skipped {
            options.push(flag.clone());
            if takes_value {
                options.push(flags[i + 1].clone());
            }
        }
        i += if takes_value { 2 } else { 1 };
    }
    format!(
        "dataset={dataset}\nseed={}\noptions={}",
        args.images.seed,
        options.join(" ")
    )
}

fn canonical(path: &Path) -> String {
    path.canonicalize()
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// The batches of `plan` without their first `rows` sample indices (a
/// resumed epoch's rows every consumer already has).
pub fn skip_rows(plan: Vec<Vec<u64>>, mut rows: u64) -> Vec<Vec<u64>> {
    plan.into_iter()
        .filter_map(|mut batch| {
            let n = batch.len() as u64;
            if rows >= n {
                rows -= n;
                return None;
            }
            batch.drain(..rows as usize);
            rows = 0;
            Some(batch)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SourceArgs` from command-line flags.
    fn flags(flags: &[&str]) -> SourceArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            source: SourceArgs,
        }
        let all = std::iter::once("serve").chain(flags.iter().copied());
        <Cli as clap::Parser>::parse_from(all).source
    }

    #[test]
    fn a_growing_datasets_identity_keeps_its_path_seed_and_options_not_its_size() {
        let fixed = identity(&flags(&["--data", "/no/such/dir"]), 1000);
        assert!(fixed.contains("(1000 samples)"), "{fixed}");
        let args = flags(&["--data", "/no/such/dir", "--watch"]);
        let watched = identity(&args, 1000);
        assert_eq!(watched, identity(&args, 1500), "growing changes the size");
        assert!(watched.contains("/no/such/dir (growing)"), "{watched}");
        assert!(watched.contains("--watch"), "{watched}");
        let seeded = flags(&["--data", "/no/such/dir", "--watch", "--seed", "3"]);
        assert_ne!(identity(&seeded, 1000), watched, "the seed stays in it");
        let replayed = identity(&flags(&["--replay", "/no/trace.csv"]), 20);
        assert_eq!(
            replayed,
            identity(&flags(&["--replay", "/no/trace.csv"]), 60)
        );
    }

    #[test]
    fn skipping_drops_whole_batches_then_cuts_one() {
        let plan = vec![vec![5, 6, 7], vec![1, 2, 3], vec![9, 8]];
        assert_eq!(skip_rows(plan.clone(), 0), plan);
        assert_eq!(skip_rows(plan.clone(), 4), vec![vec![2, 3], vec![9, 8]]);
        assert_eq!(skip_rows(plan.clone(), 6), vec![vec![9, 8]]);
        assert!(skip_rows(plan, 9).is_empty());
    }
}
