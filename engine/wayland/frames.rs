//! Pictures for the demo and the tests: SMPTE-style colour bars, packed (each plane's rows
//! tightly, planes concatenated, as `format_info` describes them).

use dmabridge_interop::Fourcc;

/// The eight bars, left to right, as opaque RGB: white, yellow, cyan, green, magenta, red,
/// blue, black.
pub const BARS: [[u8; 3]; 8] =
    [[255, 255, 255], [255, 255, 0], [0, 255, 255], [0, 255, 0], [255, 0, 255], [255, 0, 0], [0, 0, 255], [0, 0, 0]];

/// The bar that column `x` of a `width`-wide picture shows, rotated by `shift` bars.
pub fn bar_at(x: u32, width: u32, shift: usize) -> [u8; 3] {
    let i = (x as u64 * 8 / width.max(1) as u64) as usize;
    BARS[(i + shift) % 8]
}

/// BT.601 limited-range YCbCr of an RGB colour, rounded to nearest (the coefficients
/// Weston's GL renderer inverts when it samples NV12).
pub fn bt601_limited(rgb: [u8; 3]) -> [u8; 3] {
    let [r, g, b] = rgb.map(f64::from);
    let y = 16.0 + (65.481 * r + 128.553 * g + 24.966 * b) / 255.0;
    let cb = 128.0 + (-37.797 * r - 74.203 * g + 112.0 * b) / 255.0;
    let cr = 128.0 + (112.0 * r - 93.786 * g - 18.214 * b) / 255.0;
    [y, cb, cr].map(|v| v.round().clamp(0.0, 255.0) as u8)
}

/// Colour bars (rotated by `shift`) as `fourcc`; `None` for formats this does not draw
/// (AR24, XR24, AB24, XB24 and NV12 are drawn). NV12 bars should be an even number of
/// pixels wide so that every chroma sample covers one bar.
pub fn colour_bars(fourcc: Fourcc, width: u32, height: u32, shift: usize) -> Option<Vec<u8>> {
    let (w, h) = (width as usize, height as usize);
    let row_rgb: Vec<[u8; 3]> = (0..width).map(|x| bar_at(x, width, shift)).collect();
    let packed_4 = |order: fn([u8; 3]) -> [u8; 4]| {
        let row: Vec<u8> = row_rgb.iter().flat_map(|c| order(*c)).collect();
        row.repeat(h)
    };
    match fourcc {
        // Little-endian [31:0] A:R:G:B -> bytes B, G, R, A.
        Fourcc::ARGB8888 | Fourcc::XRGB8888 => Some(packed_4(|[r, g, b]| [b, g, r, 255])),
        Fourcc::ABGR8888 | Fourcc::XBGR8888 => Some(packed_4(|[r, g, b]| [r, g, b, 255])),
        Fourcc::NV12 => {
            let mut out = Vec::with_capacity(w * h + w.div_ceil(2) * 2 * h.div_ceil(2));
            let y_row: Vec<u8> = row_rgb.iter().map(|c| bt601_limited(*c)[0]).collect();
            for _ in 0..h {
                out.extend_from_slice(&y_row);
            }
            let uv_row: Vec<u8> = (0..w.div_ceil(2))
                .flat_map(|i| {
                    let [_, cb, cr] = bt601_limited(row_rgb[2 * i]);
                    [cb, cr]
                })
                .collect();
            for _ in 0..h.div_ceil(2) {
                out.extend_from_slice(&uv_row);
            }
            Some(out)
        }
        _ => None,
    }
}
