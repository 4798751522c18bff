"""Checkpoints at URLs (http(s)://, s3://, gs://, hf://, anything fsspec knows), read in ranges.

- `location`: `RemoteFile`, the remote `Location` the format readers fetch exact ranges from;
- `range_file`: a read-only file object over it, for libraries that want one (zipfile, h5py);
- `failures`: what went wrong with a URL, in words, and the URL without its secrets;
- `tensorstore_spec`: the tensorstore kvstore of a remote orbax folder.
"""
