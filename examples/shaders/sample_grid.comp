#version 450
// The host's "sampling pass" in examples/embed_host_device.rs: one invocation per point of
// a grid over the frame, each reading one texel at its centre (nearest, so the value is
// exact) and writing it as packed RGBA8 (r in the low byte).
layout(local_size_x = 8, local_size_y = 8) in;

layout(binding = 0) uniform sampler2D frame;
layout(std430, binding = 1) buffer Out { uint px[]; } out_buf;

layout(push_constant) uniform Push {
    uint frame_width;
    uint frame_height;
    uint grid_width;
    uint grid_height;
} pc;

void main() {
    uvec2 g = gl_GlobalInvocationID.xy;
    if (g.x >= pc.grid_width || g.y >= pc.grid_height) {
        return;
    }
    uvec2 texel = (g * uvec2(pc.frame_width, pc.frame_height)) / uvec2(pc.grid_width, pc.grid_height);
    vec2 uv = (vec2(texel) + 0.5) / vec2(pc.frame_width, pc.frame_height);
    out_buf.px[g.y * pc.grid_width + g.x] = packUnorm4x8(textureLod(frame, uv, 0.0));
}
