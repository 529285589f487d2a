//! Where a row's job runs: `CUDA_VISIBLE_DEVICES` from its Devices and
//! Collocation, through the [`GpuLayer`]. A row that cannot be placed fails
//! with a message that says how to fix it; the other rows run.

use std::collections::HashSet;

use crate::gpu::{GpuInfo, GpuLayer};
use crate::plan::{Collocation, PlanRow};

/// The value of `CUDA_VISIBLE_DEVICES` for a row: `""` for a CPU row (no
/// GPU visible), GPU UUIDs, or MIG instance UUIDs. `used_mig` holds the
/// instances already given to other rows of the workload.
pub(crate) fn place(
    row: &PlanRow,
    gpus: &dyn GpuLayer,
    used_mig: &mut HashSet<String>,
) -> Result<String, String> {
    if row.devices.is_empty() {
        return match row.collocation {
            Collocation::Plain => Ok(String::new()),
            _ => Err(format!(
                "Collocation {} needs GPUs: name them in Devices",
                row.collocation.as_str()
            )),
        };
    }
    let all = gpus.gpus().map_err(|e| {
        format!(
            "the row asks for GPUs {} but {e}; leave Devices empty to run it on the CPU",
            row.devices.join(",")
        )
    })?;
    let mut visible = Vec::new();
    for d in &row.devices {
        let gpu = find(&all, d).ok_or_else(|| {
            let have: Vec<String> = all
                .iter()
                .map(|g| format!("{} ({})", g.index, g.uuid))
                .collect();
            format!(
                "no GPU {d:?} on this machine; it has {}",
                if have.is_empty() {
                    "none".into()
                } else {
                    have.join(", ")
                }
            )
        })?;
        match &row.collocation {
            Collocation::Mig(profile) => {
                let i = gpu.index;
                if !gpu.mig_enabled {
                    return Err(format!(
                        "MIG is off on GPU {i}: turn it on with `sudo nvidia-smi -i {i} -mig 1`, then create an \
                         instance with `sudo nvidia-smi mig -i {i} -cgi {profile} -C`"
                    ));
                }
                let free = gpu
                    .mig
                    .iter()
                    .find(|m| m.profile == *profile && !used_mig.contains(&m.uuid))
                    .ok_or_else(|| {
                        let have: Vec<&str> = gpu.mig.iter().map(|m| m.profile.as_str()).collect();
                        format!(
                        "no free {profile} MIG instance on GPU {i} (it has: {}); create one with \
                         `sudo nvidia-smi mig -i {i} -cgi {profile} -C`",
                        if have.is_empty() { "none".to_string() } else { have.join(", ") }
                    )
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
        let e = place(&row(&["0"], Collocation::Plain), &none, &mut used).unwrap_err();
        assert!(
            e.contains("NVML could not be loaded") && e.contains("leave Devices empty"),
            "{e}"
        );
        let e = place(&row(&[], Collocation::Mps), &none, &mut used).unwrap_err();
        assert!(e.contains("needs GPUs"), "{e}");
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
        let e = place(&row(&["7"], Collocation::Plain), &fake, &mut used).unwrap_err();
        assert!(
            e.contains("no GPU \"7\"") && e.contains("GPU-fake-1"),
            "{e}"
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
        let e = place(&row(&["0"], mig("3g.20gb")), &fake, &mut used).unwrap_err();
        assert!(
            e.contains("no free 3g.20gb") && e.contains("-cgi 3g.20gb -C"),
            "{e}"
        );
        let e = place(&row(&["1"], mig("1g.5gb")), &fake, &mut used).unwrap_err();
        assert!(
            e.contains("MIG is off on GPU 1") && e.contains("-mig 1"),
            "{e}"
        );
    }
}
