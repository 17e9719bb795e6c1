#version 450
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
// dmabridge demo: the producer's animated test pattern, written straight into a linear
// AR24 frame (B, G, R, A bytes; one uint per pixel, little endian), plus the frame's
// checksum over the same pixels, reduced per workgroup and added atomically.
//
// The checksum formula is shared with demo_composite.comp (the consumer's side): each
// pixel's RGBA8 value packed as r | g<<8 | b<<16 | a<<24, times a weight that depends on
// its position, summed mod 2^32 (order-independent, so deterministic).
layout(local_size_x = 16, local_size_y = 16) in;

layout(std430, binding = 0) buffer Frame { uint words[]; } frame_buf;
layout(std430, binding = 1) buffer Sum { uint checksum[2]; } sum_buf;

layout(push_constant) uniform Push {
    uint width;
    uint height;
    uint offset_words; // plane offset / 4
    uint stride_words; // row pitch / 4
    uint frame;
} pc;

uint weight(uint x, uint y) {
    return (x + 1u) * 2654435761u ^ (y + 1u) * 40503u;
}

void main() {
    uvec2 p = gl_GlobalInvocationID.xy;
    uint contribution = 0u;
    if (p.x < pc.width && p.y < pc.height) {
        uint t = pc.frame;
        // Moving diagonal gradient, a bouncing disc, and a frame-counter bar at the top.
        uint r = (p.x + t * 8u) & 255u;
        uint g = (p.y + t * 4u) & 255u;
        uint b = ((p.x ^ p.y) + t * 2u) & 255u;
        int cx = int(pc.width / 2u) + int(float(pc.width) * 0.3 * sin(float(t) * 0.15));
        int cy = int(pc.height / 2u) + int(float(pc.height) * 0.3 * cos(float(t) * 0.11));
        int dx = int(p.x) - cx;
        int dy = int(p.y) - cy;
        int rad = int(min(pc.width, pc.height) / 8u);
        if (dx * dx + dy * dy < rad * rad) {
            r = 255u; g = 255u - (t & 127u); b = 32u;
        }
        uint bar = pc.height / 32u + 1u;
        if (p.y < bar && p.x < (t * 16u) % pc.width) {
            r = 0u; g = 0u; b = 0u;
        }
        uint a = 255u;
        frame_buf.words[pc.offset_words + p.y * pc.stride_words + p.x] = b | (g << 8) | (r << 16) | (a << 24);
        uint rgba = r | (g << 8) | (b << 16) | (a << 24);
        contribution = rgba * weight(p.x, p.y);
    }
    // One atomic per subgroup (no workgroup barriers: lavapipe runs those as coroutines,
    // which costs far more than the atomics).
    uint total = subgroupAdd(contribution);
    if (subgroupElect()) {
        atomicAdd(sum_buf.checksum[0], total);
    }
}
