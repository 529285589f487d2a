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
