#version 450
// NV12/P010 (linear, or NV12 in any tiled layout: detile and colour fused in one pass) ->
// any 8-bit RGB byte order or 2:10:10:10, and 8-bit RGB -> NV12. Bit-exact with the CPU
// reference interop/src/tiling/colour.rs (the same integers, received as push constants,
// the same operations in the same order: its 16-bit YUV -> RGB arithmetic, its RGB ->
// NV12 in Q15, arithmetic right shift = round half up, clamp to 0..max).
//
// Bindings (all arrays of 32-bit words): 0 = Y plane buffer, 1 = UV plane buffer (may be
// the same buffer as 0), 2 = RGB buffer.
// Dispatch: local_size_x = 64; flat index = gid.x + gid.y * num_groups.x * 64.
// mode 0 (NV12) / 1 (P010) -> RGB: invocation i converts the 2x2 pixels sharing chroma
//   sample (i % ceil(w/2), i / ceil(w/2)); YUV planes may have any alignment (linear) or
//   any tiled layout (tiled_kind != 0: the planes' tiled addressing below, offsets are the
//   planes' starts); RGB offset and stride are multiples of 4. Pixel (x, y) uses chroma
//   (x/2, y/2) (replication).
// mode 2, RGB -> NV12: invocation i writes 4x2 pixels at (4 * (i % ceil(w/4)),
//   2 * (i / ceil(w/4))): two Y words and one UV word (two chroma pairs); all offsets and
//   strides are multiples of 4; bytes past the image's right edge are kept.

#extension GL_GOOGLE_include_directive : require

layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) buffer YPlane { uint ydata[]; };
layout(std430, set = 0, binding = 1) buffer UVPlane { uint uvdata[]; };
layout(std430, set = 0, binding = 2) buffer Rgb { uint rgba[]; };

// std430, 29 x 32-bit = 116 bytes; Rust: dmabridge_interop::tiling::gpu::ColourPushConstants.
layout(push_constant) uniform PushConstants {
    uint mode;        // 0 NV12 -> RGB, 1 P010 -> RGB, 2 RGB -> NV12
    uint width;
    uint height;
    uint y_offset;
    uint y_stride;
    uint uv_offset;
    uint uv_stride;
    uint rgba_offset;
    uint rgba_stride;
    uint invocations;
    uint packing;     // RgbPacking::shader_word: byte index of R, G, B, A (2 bits each), or ~0 for 2:10:10:10
    uint tiled_kind;  // AddressKind of the YUV planes; 0: linear at the strides above
    uint y_tiles;     // tile width log2 | tile height log2 << 8
    uint y_tiles_x;
    uint y_tiles_y;
    uint uv_tiles;
    uint uv_tiles_x;
    uint uv_tiles_y;
    // modes 0/1: ym, rv, gu, gv, bu, bias, co, max, shift, lift (YuvToRgb::words)
    // mode 2:    yr, yg, yb, ur, ug, ub, vr, vg, vb, yo, co (RgbToYuv::words)
    int k[11];
} pc;

#include "tiled_address.glsl"

uint y_byte(uint a) { return (ydata[a >> 2] >> ((a & 3u) * 8u)) & 0xffu; }
uint uv_byte(uint a) { return (uvdata[a >> 2] >> ((a & 3u) * 8u)) & 0xffu; }

// Byte address of byte x of row y of the Y (uv == false) or UV plane.
uint plane_byte(bool uv, uint x, uint y) {
    if (pc.tiled_kind == KIND_LINEAR) {
        return uv ? pc.uv_offset + y * pc.uv_stride + x : pc.y_offset + y * pc.y_stride + x;
    }
    uint t = uv ? pc.uv_tiles : pc.y_tiles;
    TiledPlane p = TiledPlane(pc.tiled_kind, t & 0xffu, t >> 8, uv ? pc.uv_tiles_x : pc.y_tiles_x,
                              uv ? pc.uv_tiles_y : pc.y_tiles_y, 0u);
    return (uv ? pc.uv_offset : pc.y_offset) + plane_address(p, x, y);
}

// P010: the top 10 bits of a little-endian 16-bit word (samples never straddle a run).
int y_sample(uint x, uint y, bool p010) {
    if (!p010) return int(y_byte(plane_byte(false, x, y)));
    uint a = plane_byte(false, x * 2u, y);
    return int(y_byte(a) | (y_byte(a + 1u) << 8)) >> 6;
}
int uv_sample(uint a, bool p010) {
    if (!p010) return int(uv_byte(a));
    return int(uv_byte(a) | (uv_byte(a + 1u) << 8)) >> 6;
}

uint pack_rgb(int r, int g, int b) {
    if (pc.packing == 0xffffffffu) {
        return (3u << 30) | (uint(r) << 20) | (uint(g) << 10) | uint(b);
    }
    return (uint(r) << ((pc.packing & 3u) * 8u)) | (uint(g) << (((pc.packing >> 2) & 3u) * 8u))
         | (uint(b) << (((pc.packing >> 4) & 3u) * 8u)) | (255u << (((pc.packing >> 6) & 3u) * 8u));
}

// The reference's 16-bit arithmetic (colour.rs, "The arithmetic"): k = ym, rv, gu, gv, bu,
// bias, co, max, shift, lift. u and v arrive less the chroma offset.
int mulhrs(int a, int b) { return (a * b + 16384) >> 15; }
int sat16(int v) { return clamp(v, -32768, 32767); }

uint yuv_to_rgb_word(int luma, int u, int v) {
    int lift = pc.k[9];
    int l = int((uint(luma << lift) * uint(pc.k[0])) >> 16) + pc.k[5];
    int cu = u << lift, cv = v << lift;
    int r = clamp(sat16(l + mulhrs(cv, pc.k[1])) >> pc.k[8], 0, pc.k[7]);
    int g = clamp(sat16(l + mulhrs(cu, pc.k[2]) + mulhrs(cv, pc.k[3])) >> pc.k[8], 0, pc.k[7]);
    int b = clamp(sat16(l + mulhrs(cu, pc.k[4])) >> pc.k[8], 0, pc.k[7]);
    return pack_rgb(r, g, b);
}

void yuv_to_rgb(uint inv) {
    bool p010 = pc.mode == 1u;
    uint cs = p010 ? 2u : 1u;   // bytes per sample
    uint cw = (pc.width + 1u) / 2u;
    uint cy = inv / cw;
    uint cx = inv - cy * cw;
    // U and V are adjacent in one run of every layout (runs are >= 4 aligned bytes).
    uint c = plane_byte(true, cx * 2u * cs, cy);
    int u = uv_sample(c, p010) - pc.k[6];
    int v = uv_sample(c + cs, p010) - pc.k[6];
    for (uint dy = 0u; dy < 2u; dy++) {
        uint y = cy * 2u + dy;
        if (y >= pc.height) break;
        for (uint dx = 0u; dx < 2u; dx++) {
            uint x = cx * 2u + dx;
            if (x >= pc.width) break;
            int luma = y_sample(x, y, p010);
            rgba[(pc.rgba_offset + y * pc.rgba_stride + x * 4u) >> 2] = yuv_to_rgb_word(luma, u, v);
        }
    }
}

ivec3 rgb_at(uint x, uint y) {
    uint w = rgba[(pc.rgba_offset + y * pc.rgba_stride + x * 4u) >> 2];
    return ivec3(int((w >> ((pc.packing & 3u) * 8u)) & 0xffu), int((w >> (((pc.packing >> 2) & 3u) * 8u)) & 0xffu),
                 int((w >> (((pc.packing >> 4) & 3u) * 8u)) & 0xffu));
}

uint luma(ivec3 p) {
    int v = (pc.k[0] * p.r + pc.k[1] * p.g + pc.k[2] * p.b + (pc.k[9] << 15) + 16384) >> 15;
    return uint(clamp(v, 0, 255));
}

// Cb | Cr << 8 of the 2x2 block at chroma sample (cx, cy), edge pixels replicated.
uint chroma(uint cx, uint cy) {
    uint x0 = cx * 2u, y0 = cy * 2u;
    uint x1 = min(x0 + 1u, pc.width - 1u), y1 = min(y0 + 1u, pc.height - 1u);
    ivec3 s = rgb_at(x0, y0) + rgb_at(x1, y0) + rgb_at(x0, y1) + rgb_at(x1, y1);
    int co = (pc.k[10] << 17) + (1 << 16);
    int u = clamp((pc.k[3] * s.r + pc.k[4] * s.g + pc.k[5] * s.b + co) >> 17, 0, 255);
    int v = clamp((pc.k[6] * s.r + pc.k[7] * s.g + pc.k[8] * s.b + co) >> 17, 0, 255);
    return uint(u) | (uint(v) << 8);
}

void rgb_to_nv12(uint inv) {
    uint gw = (pc.width + 3u) / 4u;
    uint gy = inv / gw;
    uint x0 = (inv - gy * gw) * 4u;
    for (uint dy = 0u; dy < 2u; dy++) {
        uint y = gy * 2u + dy;
        if (y >= pc.height) break;
        uint wi = (pc.y_offset + y * pc.y_stride + x0) >> 2;
        uint word = 0u;
        uint keep = 0u;   // mask of bytes past the right edge, kept from the old word
        for (uint b = 0u; b < 4u; b++) {
            if (x0 + b < pc.width) {
                word |= luma(rgb_at(x0 + b, y)) << (b * 8u);
            } else {
                keep |= 0xffu << (b * 8u);
            }
        }
        if (keep != 0u) word |= ydata[wi] & keep;
        ydata[wi] = word;
    }
    uint cw = (pc.width + 1u) / 2u;
    uint cx = x0 / 2u;
    uint wi = (pc.uv_offset + gy * pc.uv_stride + cx * 2u) >> 2;
    uint word = chroma(cx, gy);
    if (cx + 1u < cw) {
        word |= chroma(cx + 1u, gy) << 16;
    } else {
        word |= uvdata[wi] & 0xffff0000u;
    }
    uvdata[wi] = word;
}

void main() {
    uint inv = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
    if (inv >= pc.invocations) {
        return;
    }
    if (pc.mode == 2u) {
        rgb_to_nv12(inv);
    } else {
        yuv_to_rgb(inv);
    }
}
