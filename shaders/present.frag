#version 450
// Samples the frame: RGB formats directly, YCbCr formats through the immutable sampler's
// VkSamplerYcbcrConversion (range expansion and matrix happen in the sampler). The window
// is opaque, so alpha is written as 1.
layout(location = 0) in vec2 uv;
layout(location = 0) out vec4 colour;
layout(set = 0, binding = 0) uniform sampler2D frame;
layout(push_constant) uniform Push {
    // bit 0: the swapchain format is *_SRGB, which encodes on write: decode first so that
    // the frame's (already encoded) values reach the screen unchanged.
    uint flags;
} push;

vec3 srgb_to_linear(vec3 c) {
    vec3 lo = c / 12.92;
    vec3 hi = pow((c + 0.055) / 1.055, vec3(2.4));
    return mix(hi, lo, lessThanEqual(c, vec3(0.04045)));
}

void main() {
    vec3 c = texture(frame, uv).rgb;
    if ((push.flags & 1u) != 0u) {
        c = srgb_to_linear(c);
    }
    colour = vec4(c, 1.0);
}
