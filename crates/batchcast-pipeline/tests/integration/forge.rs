//! JPEGs that lie about their size, for the tests of decode limits here and
//! in batchcast-cli (which includes this file by path).

/// Sets the size in the first frame header (SOFn) of a JPEG.
pub fn set_jpeg_size(jpeg: &mut [u8], w: u16, h: u16) {
    let mut pos = 2;
    loop {
        let marker = jpeg[pos + 1];
        let len = usize::from(u16::from_be_bytes([jpeg[pos + 2], jpeg[pos + 3]]));
        if matches!(marker, 0xc0..=0xc2) {
            jpeg[pos + 5..pos + 7].copy_from_slice(&h.to_be_bytes());
            jpeg[pos + 7..pos + 9].copy_from_slice(&w.to_be_bytes());
            return;
        }
        pos += 2 + len;
    }
}
