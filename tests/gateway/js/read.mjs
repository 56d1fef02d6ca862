// Reads Zarr v3 arrays from a running h5sidecar gateway with zarrita and prints them as JSON.
//
//   node read.mjs <store URL> <array path> [<array path> ...]
//
// Each array is opened as Zarr v3 (its zarr.json, codecs as the gateway declares them) and read
// whole.  Output: {"<path>": {"shape", "dtype", "type", "values"}} where "values" is the
// C-order data as a flat list (NaN as null; JSON numbers round-trip float64 exactly).  Any error
// goes to stderr with exit status 1, so the calling test sees zarrita's own message.
import * as zarr from "zarrita";

const [url, ...paths] = process.argv.slice(2);
if (!url || paths.length === 0) {
  console.error("usage: node read.mjs <store URL> <array path> [<array path> ...]");
  process.exit(2);
}

const root = zarr.root(new zarr.FetchStore(url));
const out = {};
for (const path of paths) {
  const arr = await zarr.open.v3(root.resolve(path), { kind: "array" });
  const chunk = await zarr.get(arr);
  out[path] = {
    shape: chunk.shape,
    dtype: arr.dtype,
    type: chunk.data.constructor.name,
    // BigInt (64-bit integers) is not JSON: send its exact decimal text instead.
    values: Array.from(chunk.data, (v) => (typeof v === "bigint" ? v.toString() : v)),
  };
}
process.stdout.write(JSON.stringify(out));
