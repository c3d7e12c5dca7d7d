/* The pixel (x, y) of an element of every image type, in its default buffer format.
 * Generated from tensorlayout.image.ROWS by tensorlayout.opencl.conv.pixel_macros():
 * edit the rows, not this file.  Arguments: the element's indices in the buffer's
 * order (the lane dimension's index as its group of four, d4 = d / 4), then the sizes.
 */

#define TL_Q(x) (((x) + 3) / 4)

#define PIXEL_IN_OUT_CHANNEL(n, h, w, c4, N, H, W, C) ((int2)((c4)*(W) + (w), (n)*(H) + (h)))
#define PIXEL_IN_OUT_HEIGHT(n, h4, w, c, N, H, W, C) ((int2)((c)*(W) + (w), (n)*TL_Q((H)) + (h4)))
#define PIXEL_IN_OUT_WIDTH(n, h, w4, c, N, H, W, C) ((int2)((c)*TL_Q((W)) + (w4), (n)*(H) + (h)))
#define PIXEL_ARGUMENT(l4, L) ((int2)((l4), 0))
#define PIXEL_CONV2D_FILTER(o4, i, h, w, O, I, H, W) ((int2)((i), (o4)*(H)*(W) + (h)*(W) + (w)))
#define PIXEL_DW_CONV2D_FILTER(m, i4, h, w, M, I, H, W) ((int2)((m)*(H)*(W) + (h)*(W) + (w), (i4)))
#define PIXEL_WEIGHT_HEIGHT(o4, i, h, w, O, I, H, W) ((int2)((h)*(W)*(I) + (w)*(I) + (i), (o4)))
#define PIXEL_WEIGHT_WIDTH(o, i4, h, w, O, I, H, W) ((int2)((h)*(W)*TL_Q((I)) + (w)*TL_Q((I)) + (i4), (o)))
#define PIXEL_WINOGRAD_FILTER(t, o, i4, T2, O, I) ((int2)((i4), (t)*(O) + (o)))
