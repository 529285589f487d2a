//! Sweeps: a row with `parameters` expands into one row per combination
//! (`method: grid`) or per draw (`method: random`, `count`, `seed`).
//!
//! Random draws use splitmix64, written here in five lines, because a
//! plan's expansion must stay the same across batchcast versions and
//! `rand`'s seeded generators do not promise stable values between
//! releases.

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
) -> Result<Vec<Vec<(String, String)>>, String> {
    if parameters.is_empty() {
        return Err("the sweep has no parameters".into());
    }
    if let Some((name, _)) = parameters.iter().find(|(_, v)| v.is_empty()) {
        return Err(format!("the sweep parameter {name:?} has no values"));
    }
    match method {
        Method::Grid => {
            let total = parameters
                .iter()
                .try_fold(1usize, |n, (_, v)| n.checked_mul(v.len()))
                .filter(|n| *n <= max);
            let total =
                total.ok_or_else(|| format!("the grid has more than {max} combinations"))?;
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
            if count == 0 || count > max {
                return Err(format!("a random sweep's count is 1 to {max}"));
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

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
