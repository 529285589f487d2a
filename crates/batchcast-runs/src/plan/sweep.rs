//! Sweeps: a row with `parameters` expands into one row per combination
//! (`method: grid`) or per draw (`method: random`, `count`, `seed`).
//!
//! Random draws use splitmix64, written here in five lines, because a
//! plan's expansion must stay the same across batchcast versions and
//! `rand`'s seeded generators do not promise stable values between
//! releases.

/// Why a sweep cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SweepError {
    #[error("the sweep has no parameters")]
    NoParameters,
    #[error("the sweep parameter {0:?} has no values")]
    NoValues(String),
    #[error("a random sweep's count must be at least 1")]
    ZeroCount,
    #[error("{what} {n} combinations, and the entries before it leave no room for any")]
    NoRoom { what: &'static str, n: u128 },
    #[error("{what} {n} combinations, more than the {left} runs left")]
    TooMany {
        what: &'static str,
        n: u128,
        left: usize,
    },
}

/// How a sweep picks combinations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    Grid,
    Random { count: usize, seed: u64 },
}

/// The combinations of `parameters` (name, values) as `(name, value)` lists.
pub(crate) fn expand(
    parameters: &[(String, Vec<String>)],
    method: Method,
    max: usize,
) -> Result<Vec<Vec<(String, String)>>, SweepError> {
    if parameters.is_empty() {
        return Err(SweepError::NoParameters);
    }
    if let Some((name, _)) = parameters.iter().find(|(_, v)| v.is_empty()) {
        return Err(SweepError::NoValues(name.clone()));
    }
    match method {
        Method::Grid => {
            let total = parameters
                .iter()
                .fold(1u128, |n, (_, v)| n.saturating_mul(v.len() as u128));
            let total = usize::try_from(total)
                .ok()
                .filter(|n| *n <= max)
                .ok_or_else(|| too_many("the grid has", total, max))?;
            Ok((0..total)
                .map(|mut i| {
                    // The last parameter varies fastest.
                    let mut combo: Vec<(String, String)> = parameters
                        .iter()
                        .rev()
                        .map(|(name, values)| {
                            let v = values[i % values.len()].clone();
                            i /= values.len();
                            (name.clone(), v)
                        })
                        .collect();
                    combo.reverse();
                    combo
                })
                .collect())
        }
        Method::Random { count, seed } => {
            if count == 0 {
                return Err(SweepError::ZeroCount);
            }
            if count > max {
                return Err(too_many("the random sweep draws", count as u128, max));
            }
            let mut state = seed;
            Ok((0..count)
                .map(|_| {
                    parameters
                        .iter()
                        .map(|(name, values)| {
                            let r = splitmix64(&mut state);
                            (
                                name.clone(),
                                values[(r % values.len() as u64) as usize].clone(),
                            )
                        })
                        .collect()
                })
                .collect())
        }
    }
}

/// Why a sweep of `n` runs does not fit in the `left` runs the plan has
/// room for.
fn too_many(what: &'static str, n: u128, left: usize) -> SweepError {
    if left == 0 {
        SweepError::NoRoom { what, n }
    } else {
        SweepError::TooMany { what, n, left }
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
