//! Without libcuda, the CUDA backend is an error naming the library, not a
//! panic.

use batchcast_device::{Cuda, Error};

#[test]
fn cuda_without_a_driver_is_no_driver() {
    match Cuda::open() {
        Err(Error::NoDriver { library, message }) => {
            assert!(library.contains("libcuda"), "{library}");
            assert!(!message.is_empty());
            let shown = Error::NoDriver { library, message }.to_string();
            assert!(
                shown.contains("libcuda") && shown.contains("BATCHCAST_DEVICE_STAND_IN"),
                "{shown}"
            );
            println!("{shown}");
        }
        Ok(cuda) => println!("skipped: a libcuda is present here ({cuda:?})"),
        Err(other) => println!("skipped: a libcuda is present here, and it says: {other}"),
    }
}

/// Without a driver (and without the stand-in), a producer asked to serve
/// a GPU falls back to the host path with a warning naming the driver.
#[test]
fn serving_a_gpu_without_a_driver_falls_back_and_says_why() {
    if std::env::var_os(batchcast_device::STAND_IN_ENV).is_some() {
        eprintln!("skipped: {} is set", batchcast_device::STAND_IN_ENV);
        return;
    }
    if batchcast_device::Cuda::open().is_ok() {
        eprintln!("skipped: this machine has a CUDA driver");
        return;
    }
    let served = batchcast_device::serve_devices("cuda:0").expect("a well-formed list");
    assert!(served.mirrors.is_empty());
    let why = served.fallback.expect("a fallback warning");
    assert!(
        why.contains("libcuda") && why.contains("host path"),
        "{why}"
    );
    assert!(
        batchcast_device::serve_devices("cuda:x").is_err(),
        "a malformed list is an error"
    );
}
