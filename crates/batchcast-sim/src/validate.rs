//! Refusing job lists the simulator cannot run, naming the job and the fix.

use crate::cluster::ClusterSpec;
use crate::error::SimError;
use crate::job::JobSpec;

/// Checks a job list before simulating it on `spec`.
pub fn validate(spec: &ClusterSpec, jobs: &[JobSpec]) -> Result<(), SimError> {
    spec.validate()?;
    if jobs.len() > u32::MAX as usize / 2 {
        return Err(SimError::Config("too many jobs".into()));
    }
    for j in jobs {
        let bad = |why: String| Err(SimError::Config(format!("job {}: {why}", j.id)));
        if j.gpus == 0 || j.gpus as u64 > spec.total_gpus() {
            return bad(format!(
                "needs {} GPUs; the cluster has {} (give it 1 to {1})",
                j.gpus,
                spec.total_gpus()
            ));
        }
        if !(j.arrival.is_finite() && j.arrival >= 0.0) {
            return bad("arrival must be a finite time >= 0".into());
        }
        if !(j.iterations.is_finite()
            && j.iterations > 0.0
            && j.iter_time.is_finite()
            && j.iter_time > 0.0)
        {
            return bad("iterations and time per iteration must be positive and finite".into());
        }
        let s = j.slowdown;
        if ![s.cross_slot, s.cross_machine, s.cross_rack]
            .iter()
            .all(|x| x.is_finite() && *x >= 1.0)
        {
            return bad("slowdowns must be finite multipliers >= 1".into());
        }
        if !(j.cpu.is_finite() && j.cpu >= 0.0) {
            return bad("CPU demand must be finite and >= 0".into());
        }
    }
    Ok(())
}
