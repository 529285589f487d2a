//! Where a row's job runs: `CUDA_VISIBLE_DEVICES` from its Devices and
//! Collocation, through the [`GpuLayer`]. A row that cannot be placed fails
//! with a message that says how to fix it; the other rows run.

use std::collections::HashSet;

use crate::gpu::{GpuInfo, GpuLayer};
use crate::plan::{Collocation, PlanRow};

/// Why a row cannot be placed; each message says how to fix it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PlaceError {
    /// A Collocation other than `-` on a row with no Devices.
    #[error("Collocation {collocation} needs GPUs: name them in Devices")]
    NeedsGpus { collocation: String },
    /// The GPU layer cannot list the GPUs (`reason` says why).
    #[error(
        "the row asks for GPUs {devices} but {reason}; leave Devices empty to run it on the CPU"
    )]
    NoGpus { devices: String, reason: String },
    /// A Devices entry that is no GPU's index or UUID.
    #[error("no GPU {device:?} on this machine; it has {have}")]
    NoSuchGpu { device: String, have: String },
    /// A MIG row on a GPU with MIG off.
    #[error(
        "MIG is off on GPU {index}: turn it on with `sudo nvidia-smi -i {index} -mig 1`, then create an \
         instance with `sudo nvidia-smi mig -i {index} -cgi {profile} -C`"
    )]
    MigOff { index: u32, profile: String },
    /// Every instance of the profile is taken (or there is none).
    #[error(
        "no free {profile} MIG instance on GPU {index} (it has: {have}); create one with \
         `sudo nvidia-smi mig -i {index} -cgi {profile} -C`"
    )]
    NoFreeMig {
        profile: String,
        index: u32,
        have: String,
    },
    /// An MPS row when the MPS daemon could not be started.
    #[error("cannot start MPS: {0}")]
    Mps(String),
}

/// `items` joined by ", ", or "none".
fn listed(items: Vec<String>) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

/// The value of `CUDA_VISIBLE_DEVICES` for a row: `""` for a CPU row (no
/// GPU visible), GPU UUIDs, or MIG instance UUIDs. `used_mig` holds the
/// instances already given to other rows of the workload.
pub(crate) fn place(
    row: &PlanRow,
    gpus: &dyn GpuLayer,
    used_mig: &mut HashSet<String>,
) -> Result<String, PlaceError> {
    if row.devices.is_empty() {
        return match row.collocation {
            Collocation::Plain => Ok(String::new()),
            _ => Err(PlaceError::NeedsGpus {
                collocation: row.collocation.as_str().to_string(),
            }),
        };
    }
    let all = gpus.gpus().map_err(|e| PlaceError::NoGpus {
        devices: row.devices.join(","),
        reason: e.to_string(),
    })?;
    let mut visible = Vec::new();
    for d in &row.devices {
        let gpu = find(&all, d).ok_or_else(|| PlaceError::NoSuchGpu {
            device: d.clone(),
            have: listed(
                all.iter()
                    .map(|g| format!("{} ({})", g.index, g.uuid))
                    .collect(),
            ),
        })?;
        match &row.collocation {
            Collocation::Mig(profile) => {
                let index = gpu.index;
                if !gpu.mig_enabled {
                    return Err(PlaceError::MigOff {
                        index,
                        profile: profile.clone(),
                    });
                }
                let free = gpu
                    .mig
                    .iter()
                    .find(|m| m.profile == *profile && !used_mig.contains(&m.uuid))
                    .ok_or_else(|| PlaceError::NoFreeMig {
                        profile: profile.clone(),
                        index,
                        have: listed(gpu.mig.iter().map(|m| m.profile.clone()).collect()),
                    })?;
                used_mig.insert(free.uuid.clone());
                visible.push(free.uuid.clone());
            }
            _ => visible.push(gpu.uuid.clone()),
        }
    }
    Ok(visible.join(","))
}

fn find<'a>(all: &'a [GpuInfo], device: &str) -> Option<&'a GpuInfo> {
    all.iter()
        .find(|g| device.parse::<u32>().ok() == Some(g.index) || g.uuid == device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{FakeGpus, MigInstance, NoGpus};

    /// Asserts that `placed` is an error whose message holds every one of
    /// `needles`.
    fn refused(placed: Result<String, PlaceError>, needles: &[&str]) {
        let e = placed.unwrap_err().to_string();
        assert!(needles.iter().all(|n| e.contains(n)), "{e}");
    }

    fn row(devices: &[&str], collocation: Collocation) -> PlanRow {
        PlanRow {
            row: 1,
            experiment: "e".into(),
            workload: "w".into(),
            name: "a".into(),
            status: None,
            devices: devices.iter().map(|s| s.to_string()).collect(),
            collocation,
            listeners: vec![],
            data: None,
            file: "train.py".into(),
            args: vec![],
            params: vec![],
        }
    }

    #[test]
    fn cpu_rows_see_no_gpu_and_gpu_rows_fail_clearly_without_gpus() {
        let none = NoGpus {
            reason: "NVML could not be loaded".into(),
        };
        let mut used = HashSet::new();
        assert_eq!(
            place(&row(&[], Collocation::Plain), &none, &mut used),
            Ok(String::new())
        );
        refused(
            place(&row(&["0"], Collocation::Plain), &none, &mut used),
            &["NVML could not be loaded", "leave Devices empty"],
        );
        refused(
            place(&row(&[], Collocation::Mps), &none, &mut used),
            &["needs GPUs"],
        );
    }

    #[test]
    fn gpus_by_index_or_uuid() {
        let fake = FakeGpus::plain(2);
        let mut used = HashSet::new();
        assert_eq!(
            place(
                &row(&["1", "GPU-fake-0"], Collocation::Plain),
                &fake,
                &mut used
            )
            .unwrap(),
            "GPU-fake-1,GPU-fake-0"
        );
        refused(
            place(&row(&["7"], Collocation::Plain), &fake, &mut used),
            &["no GPU \"7\"", "GPU-fake-1"],
        );
    }

    #[test]
    fn mig_profiles_match_free_instances_or_say_how_to_make_one() {
        let mut fake = FakeGpus::plain(2);
        fake.gpus[0].mig_enabled = true;
        fake.gpus[0].mig = vec![
            MigInstance {
                uuid: "MIG-a".into(),
                profile: "3g.20gb".into(),
            },
            MigInstance {
                uuid: "MIG-b".into(),
                profile: "3g.20gb".into(),
            },
            MigInstance {
                uuid: "MIG-c".into(),
                profile: "1g.5gb".into(),
            },
        ];
        let mig = |p: &str| Collocation::Mig(p.into());
        let mut used = HashSet::new();
        assert_eq!(
            place(&row(&["0"], mig("3g.20gb")), &fake, &mut used).unwrap(),
            "MIG-a"
        );
        assert_eq!(
            place(&row(&["0"], mig("3g.20gb")), &fake, &mut used).unwrap(),
            "MIG-b"
        );
        refused(
            place(&row(&["0"], mig("3g.20gb")), &fake, &mut used),
            &["no free 3g.20gb", "-cgi 3g.20gb -C"],
        );
        refused(
            place(&row(&["1"], mig("1g.5gb")), &fake, &mut used),
            &["MIG is off on GPU 1", "-mig 1"],
        );
    }
}
