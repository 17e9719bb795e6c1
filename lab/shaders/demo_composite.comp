#version 450
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
// dmabridge demo: the consumer's compositor. It samples the imported frame (any format
// the sampler can read; NV12 through a sampler YCbCr conversion), composites it under the
// consumer's own overlay into an RGBA8 output buffer, and sums the frame's checksum with
// the same formula as demo_pattern*.comp, over the sampled (not the composited) values.
//
// Sampling is nearest, inside each texel, so the values are exact. For NV12
// the demo's conversion uses the RGB_IDENTITY model (the sampler reconstructs the planes and
// returns raw Cr, Y, Cb in r, g, b), so the checksum is exact too; the BT.709 narrow-range
// matrix is applied here, for the composited output only (`yuv` = 1).
layout(local_size_x = 16, local_size_y = 16) in;

layout(binding = 0) uniform sampler2D src;
layout(std430, binding = 1) buffer Out { uint px[]; } out_buf;
layout(std430, binding = 2) buffer Sum { uint checksum[2]; } sum_buf;

layout(push_constant) uniform Push {
    uint width;
    uint height;
    uint out_stride; // pixels per output row; 0: do not write the output
    uint frame;
    uint src_width;  // the frame's extent, for normalised texel-centre coordinates
    uint src_height;
    uint yuv;        // 1: the sampled values are raw (Cr, Y, Cb); convert for the output
} pc;

vec3 bt709_narrow(vec3 crycb) {
    float y = (crycb.g * 255.0 - 16.0) / 219.0;
    float cb = (crycb.b * 255.0 - 128.0) / 224.0;
    float cr = (crycb.r * 255.0 - 128.0) / 224.0;
    return clamp(vec3(y + 1.5748 * cr, y - 0.1873 * cb - 0.4681 * cr, y + 1.8556 * cb), 0.0, 1.0);
}

uint weight(uint x, uint y) {
    return (x + 1u) * 2654435761u ^ (y + 1u) * 40503u;
}

void main() {
    uvec2 p = gl_GlobalInvocationID.xy;
    uint contribution = 0u;
    if (p.x < pc.width && p.y < pc.height) {
        // Sampler YCbCr conversion allows only OpImageSample*, so textureLod(), nearest, a
        // quarter texel into the pixel rather than at its centre: the luma texel is the same,
        // and cosited-even chroma reconstruction (chroma coordinate u/2 + 1/4 in texels) then
        // lands inside the pixel's own 2x2 block's sample, well away from the boundary that a
        // centre sample of an odd pixel would sit exactly on (where float rounding decides).
        vec2 uv = (vec2(p) + 0.25) / vec2(pc.src_width, pc.src_height);
        vec4 c = textureLod(src, uv, 0.0);
        uint rgba = packUnorm4x8(c);
        contribution = rgba * weight(p.x, p.y);
        if (pc.out_stride != 0u) {
            // The consumer's overlay: a translucent border, as a compositor's decoration.
            uint edge = max(pc.width, pc.height) / 40u + 2u;
            bool border = p.x < edge || p.y < edge || p.x + edge >= pc.width || p.y + edge >= pc.height;
            vec4 rgb = pc.yuv != 0u ? vec4(bt709_narrow(c.rgb), 1.0) : c;
            vec4 o = border ? mix(rgb, vec4(0.1, 0.3, 0.9, 1.0), 0.75) : rgb;
            out_buf.px[p.y * pc.out_stride + p.x] = packUnorm4x8(vec4(o.rgb, 1.0));
        }
    }
    // One atomic per subgroup (no workgroup barriers: lavapipe runs those as coroutines,
    // which costs far more than the atomics).
    uint total = subgroupAdd(contribution);
    if (subgroupElect()) {
        atomicAdd(sum_buf.checksum[0], total);
    }
}
