//! `batchcast serve --device`: the arena mirrored on the GPUs named, the
//! mirrors handed to consumers in their welcome, and the host path, with a
//! warning, where they cannot be made. The GPUs here are the host-memory
//! stand-in (`BATCHCAST_DEVICE_STAND_IN`): the seams, not GPU evidence.

mod common;

use common::{assert_says, connect, Env, Fail, Proc};

const STAND_IN: &str = "BATCHCAST_DEVICE_STAND_IN";

fn serve(env: &Env, name: &str, device: &str, stand_ins: Option<&str>) -> Proc {
    let mut cmd = env.cmd(&format!(
        "serve --name {name} --synthetic --json --epochs 0 --device {device}"
    ));
    match stand_ins {
        Some(n) => cmd.env(STAND_IN, n),
        None => cmd.env_remove(STAND_IN),
    };
    let mut p = Proc::start(cmd);
    p.expect("listening");
    p
}

#[test]
fn serve_hands_consumers_the_mirror_of_the_gpu_it_names() {
    let env = Env::new();
    let mut p = serve(&env, "gpu", "cuda:1", Some("2"));
    let c = connect("gpu", env.path().to_path_buf());
    let devices: Vec<&str> = c.mirrors().iter().map(|(m, _)| m.device.as_str()).collect();
    assert_eq!(devices.len(), 1, "{devices:?}");
    assert!(
        devices[0].starts_with("GPU-") && devices[0].ends_with('1'),
        "{devices:?}"
    );
    drop(c);
    p.signal(libc::SIGINT);
    p.finish();
    let said = p.stderr_text();
    assert_says(&said, "mirroring the arena on cuda:1");
}

#[test]
fn serve_without_a_driver_warns_and_serves_on_the_host_path() {
    let env = Env::new();
    let mut p = serve(&env, "host", "cuda:0", None);
    let c = connect("host", env.path().to_path_buf());
    let mirrors = c.mirrors().len();
    drop(c);
    p.signal(libc::SIGINT);
    p.finish();
    let said = p.stderr_text();
    if !said.contains("libcuda") {
        eprintln!("skipped: this machine has a CUDA driver ({said})");
        return;
    }
    assert_eq!(mirrors, 0);
    assert_says(&said, "warning:");
    assert_says(&said, "host path");
}

#[test]
fn a_malformed_device_list_is_refused_with_what_to_write() {
    let env = Env::new();
    let said = env.cmd("serve --name bad --synthetic --device gpu0").fail();
    assert_says(&said, "--device gpu0");
    assert_says(&said, "cuda:N");
}
