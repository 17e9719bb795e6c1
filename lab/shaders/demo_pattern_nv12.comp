#version 450
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
// dmabridge demo: the producer's animated pattern as NV12 (a Y plane, then interleaved
// Cb Cr at half resolution), written into linear planes at any word-aligned offsets and
// strides, plus the frame's checksum. Each invocation writes a 4x2 block of pixels: one
// Y word in each of its two rows and one CbCr word (two chroma samples).
//
// Checksum (shared with demo_composite.comp, which samples NV12 through an RGB_IDENTITY
// YCbCr conversion, so it sees r = Cr, g = Y, b = Cb, a = 1): per pixel
// (Cr | Y << 8 | Cb << 16 | 255 << 24) * weight(x, y), summed mod 2^32, where Cb, Cr are
// the pixel's own 2x2 block's chroma (the consumer samples a quarter texel into each pixel,
// where cosited-even nearest reconstruction gives exactly that sample).
layout(local_size_x = 16, local_size_y = 16) in;

layout(std430, binding = 0) buffer Frame { uint words[]; } frame_buf;
layout(std430, binding = 1) buffer Sum { uint checksum[2]; } sum_buf;

layout(push_constant) uniform Push {
    uint width;   // multiple of 4
    uint height;  // multiple of 2
    uint y_offset_words;
    uint y_stride_words;
    uint frame;
    uint uv_offset_words;
    uint uv_stride_words;
} pc;

uint weight(uint x, uint y) {
    return (x + 1u) * 2654435761u ^ (y + 1u) * 40503u;
}

uint cb_at(uint cx, uint t) {
    return 16u + ((cx * 3u + t * 5u) % 225u);
}

uint cr_at(uint cx, uint cy, uint t) {
    return 16u + ((cy * 3u + cx + t * 2u) % 225u);
}

uint luma(uint x, uint y, uint t) {
    int cx = int(pc.width / 2u) + int(float(pc.width) * 0.3 * sin(float(t) * 0.15));
    int cy = int(pc.height / 2u) + int(float(pc.height) * 0.3 * cos(float(t) * 0.11));
    int dx = int(x) - cx;
    int dy = int(y) - cy;
    int rad = int(min(pc.width, pc.height) / 8u);
    if (dx * dx + dy * dy < rad * rad) {
        return 235u;
    }
    return 16u + ((x + y + t * 6u) % 220u);
}

void main() {
    uvec2 b = gl_GlobalInvocationID.xy; // block: pixels 4b.x .. 4b.x+3, rows 2b.y, 2b.y+1
    uint contribution = 0u;
    if (b.x * 4u < pc.width && b.y * 2u < pc.height) {
        uint t = pc.frame;
        uint x0 = b.x * 4u;
        uint y0 = b.y * 2u;
        // Two chroma samples: (cb0, cr0) for pixels x0, x0+1; (cb1, cr1) for x0+2, x0+3.
        uint cx0 = b.x * 2u;
        frame_buf.words[pc.uv_offset_words + b.y * pc.uv_stride_words + b.x] =
            cb_at(cx0, t) | (cr_at(cx0, b.y, t) << 8) | (cb_at(cx0 + 1u, t) << 16) | (cr_at(cx0 + 1u, b.y, t) << 24);

        for (uint r = 0u; r < 2u; r++) {
            uint y = y0 + r;
            uint word = 0u;
            for (uint i = 0u; i < 4u; i++) {
                uint x = x0 + i;
                uint l = luma(x, y, t);
                word |= l << (8u * i);
                uint sx = x / 2u;
                uint sy = y / 2u;
                uint rgba = cr_at(sx, sy, t) | (l << 8) | (cb_at(sx, t) << 16) | (255u << 24);
                contribution += rgba * weight(x, y);
            }
            frame_buf.words[pc.y_offset_words + y * pc.y_stride_words + b.x] = word;
        }
    }
    uint total = subgroupAdd(contribution);
    if (subgroupElect()) {
        atomicAdd(sum_buf.checksum[0], total);
    }
}
