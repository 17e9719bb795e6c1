#version 450
// Tiled <-> linear copy of one plane, on buffers of 32-bit words.
// CPU reference and host-side parameters: interop/src/tiling/{address,cpu,gpu}.rs. The
// address function (tiled_address.glsl, shared with colour.comp) mirrors address.rs.
//
// Bindings: 0 = source, 1 = destination (read for partial words, then written). Each is
// also declared as uvec4[] (an alias of the same descriptor) for 16-byte accesses.
// local_size_x = 64. Invocations past the work return at once.
//
// mode 1, TILE (linear binding 0 -> tiled binding 1; layout_kind != 0): the group of
//   16 bytes at x = 16 * gid.x of padded row y = gid.y + gid.z * num_groups.y. One uvec4
//   store when those bytes are contiguous and 16-aligned on the tiled side, else four word
//   stores at their tiled addresses. Padding is written as zeros.
// mode 2, DETILE_ROWS (tiled binding 0 -> linear binding 1, linear offset and stride
//   multiples of 4): same grid over the visible rows; rows own disjoint words. The last
//   word of a row may be partial: the bytes past the row are read back and kept.
// mode 0, DETILE_ANY (any linear offset/stride): flat index i = gid.x + gid.y *
//   num_groups.x * 64 owns the 16-byte-aligned group of destination words
//   4 * (linear_offset / 16 + i) .. +3 (below linear_offset / 16 * 4 + linear_words); bytes
//   outside the visible rows are kept, words with no visible byte are not touched.

#extension GL_GOOGLE_include_directive : require

layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer Src { uint src[]; };
layout(std430, set = 0, binding = 0) readonly buffer Src4 { uvec4 src4[]; };
layout(std430, set = 0, binding = 1) buffer Dst { uint dst[]; };
layout(std430, set = 0, binding = 1) buffer Dst4 { uvec4 dst4[]; };

// std430, 16 x uint = 64 bytes; Rust: dmabridge_interop::tiling::gpu::TilePushConstants.
layout(push_constant) uniform PushConstants {
    uint mode;            // 0 detile (any alignment), 1 tile, 2 detile (4-aligned linear side)
    uint layout_kind;     // AddressKind: a KIND_ constant of tiled_address.glsl
    uint width_bytes;     // visible bytes per row
    uint rows;            // visible rows
    uint tile_width_log2; // tile width in bytes = 1 << this
    uint tile_height_log2;// tile height in rows = 1 << this (NVIDIA: block of 2^N GOBs)
    uint tiles_x;
    uint tiles_y;
    uint padded_width;    // tiles_x << tile_width_log2
    uint padded_rows;     // tiles_y << tile_height_log2
    uint tiled_offset;    // byte offset of the plane on the tiled side
    uint tiled_pitch;     // bytes per row on the tiled side when layout_kind == 0
    uint linear_offset;   // byte offset of the plane on the linear side
    uint linear_stride;   // bytes per row on the linear side
    uint linear_words;    // mode 0: destination words from (linear_offset / 16) * 4 to the end
    uint invocations;     // mode 0: flat invocations with work
} pc;

#include "tiled_address.glsl"

// Byte offset of (x, y) inside the plane on the tiled side.
uint tiled_address(uint x, uint y) {
    TiledPlane p = TiledPlane(pc.layout_kind, pc.tile_width_log2, pc.tile_height_log2, pc.tiles_x, pc.tiles_y, pc.tiled_pitch);
    return plane_address(p, x, y);
}

// True when 16 bytes of a row starting at a multiple of 16 are contiguous on the tiled side.
bool runs_of_16() {
    return pc.layout_kind != KIND_ROW_MAJOR_TILES || pc.tile_width_log2 >= 4u;
}

uint src_byte(uint a) {
    return (src[a >> 2] >> ((a & 3u) * 8u)) & 0xffu;
}

// Bytes x .. x+n-1 (n <= 4, x % 4 == 0, all visible) of row y on the tiled side: one run.
uint tiled_bytes(uint x, uint y, uint n) {
    uint a = pc.tiled_offset + tiled_address(x, y);
    if ((a & 3u) == 0u && n == 4u) {
        return src[a >> 2];
    }
    uint word = 0u;
    for (uint b = 0u; b < n; b++) {
        word |= src_byte(a + b) << (b * 8u);
    }
    return word;
}

// Bytes x .. x+3 (x % 4 == 0) of linear row y, zero past the visible plane.
uint linear_word(uint x, uint y) {
    if (y >= pc.rows || x >= pc.width_bytes) {
        return 0u;
    }
    uint a = pc.linear_offset + y * pc.linear_stride + x;
    if ((a & 3u) == 0u && x + 4u <= pc.width_bytes) {
        return src[a >> 2];
    }
    uint word = 0u;
    for (uint b = 0u; b < 4u && x + b < pc.width_bytes; b++) {
        word |= src_byte(a + b) << (b * 8u);
    }
    return word;
}

void tile(uint x0, uint y) {
    if (x0 >= pc.padded_width || y >= pc.padded_rows) {
        return;
    }
    uint a0 = pc.tiled_offset + tiled_address(x0, y);
    if (x0 + 16u <= pc.padded_width && runs_of_16() && (a0 & 15u) == 0u) {
        uvec4 v;
        uint la = pc.linear_offset + y * pc.linear_stride + x0;
        if (y < pc.rows && x0 + 16u <= pc.width_bytes && (la & 15u) == 0u) {
            v = src4[la >> 4];
        } else {
            v = uvec4(linear_word(x0, y), linear_word(x0 + 4u, y), linear_word(x0 + 8u, y), linear_word(x0 + 12u, y));
        }
        dst4[a0 >> 4] = v;
        return;
    }
    for (uint k = 0u; k < 4u; k++) {
        uint x = x0 + k * 4u;
        if (x >= pc.padded_width) {
            return;
        }
        dst[(pc.tiled_offset + tiled_address(x, y)) >> 2] = linear_word(x, y);
    }
}

void detile_rows(uint x0, uint y) {
    if (x0 >= pc.width_bytes || y >= pc.rows) {
        return;
    }
    uint la = pc.linear_offset + y * pc.linear_stride + x0;
    if (x0 + 16u <= pc.width_bytes) {
        uint a0 = pc.tiled_offset + tiled_address(x0, y);
        if ((la & 15u) == 0u && (a0 & 15u) == 0u && runs_of_16()) {
            dst4[la >> 4] = src4[a0 >> 4];
            return;
        }
        uvec4 v = uvec4(tiled_bytes(x0, y, 4u), tiled_bytes(x0 + 4u, y, 4u), tiled_bytes(x0 + 8u, y, 4u), tiled_bytes(x0 + 12u, y, 4u));
        if ((la & 15u) == 0u) {
            dst4[la >> 4] = v;
            return;
        }
        for (uint k = 0u; k < 4u; k++) {
            dst[(la >> 2) + k] = v[k];
        }
        return;
    }
    for (uint k = 0u; k < 4u; k++) {
        uint x = x0 + k * 4u;
        if (x >= pc.width_bytes) {
            return;
        }
        uint n = min(4u, pc.width_bytes - x);
        uint w = (la >> 2) + k;
        uint word = tiled_bytes(x, y, n);
        if (n < 4u) {
            // The row ends inside this word; the bytes after it are not ours to change.
            word |= dst[w] & (0xffffffffu << (n * 8u));
        }
        dst[w] = word;
    }
}

// Mode 0: the destination word at index w, keeping bytes outside the visible plane.
// Returns false when no byte of the word is visible (the word is then left alone).
bool detile_word(uint w, out uint word) {
    uint p = w * 4u;
    if (p >= pc.linear_offset) {
        uint rel = p - pc.linear_offset;
        uint y = rel / pc.linear_stride;
        uint x = rel - y * pc.linear_stride;
        if (y < pc.rows && x + 4u <= pc.width_bytes && (x & 3u) == 0u) {
            word = tiled_bytes(x, y, 4u);
            return true;
        }
    }
    bool any = false;
    uint old = 0u;
    bool have_old = false;
    word = 0u;
    for (uint b = 0u; b < 4u; b++) {
        uint pb = p + b;
        bool visible = false;
        uint value = 0u;
        if (pb >= pc.linear_offset) {
            uint rel = pb - pc.linear_offset;
            uint y = rel / pc.linear_stride;
            uint x = rel - y * pc.linear_stride;
            if (y < pc.rows && x < pc.width_bytes) {
                visible = true;
                value = src_byte(pc.tiled_offset + tiled_address(x, y));
            }
        }
        if (!visible) {
            if (!have_old) {
                old = dst[w];
                have_old = true;
            }
            value = (old >> (b * 8u)) & 0xffu;
        }
        any = any || visible;
        word |= value << (b * 8u);
    }
    return any;
}

void detile_any(uint inv) {
    if (inv >= pc.invocations) {
        return;
    }
    uint first = (pc.linear_offset >> 4) << 2;
    uint w0 = first + inv * 4u;
    uint end = first + pc.linear_words;
    for (uint k = 0u; k < 4u; k++) {
        uint w = w0 + k;
        if (w >= end) {
            return;
        }
        uint word;
        if (detile_word(w, word)) {
            dst[w] = word;
        }
    }
}

void main() {
    if (pc.mode == 0u) {
        detile_any(gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u);
        return;
    }
    uint x0 = gl_GlobalInvocationID.x * 16u;
    uint y = gl_GlobalInvocationID.y + gl_GlobalInvocationID.z * gl_NumWorkGroups.y;
    if (pc.mode == 1u) {
        tile(x0, y);
    } else {
        detile_rows(x0, y);
    }
}
