// Rewrites a shard's six datasets gzip-compressed (level 6, chunks of 1024 rows), like h5py's
// create_dataset(..., compression="gzip") in MLPerf's BERT preparation.
#include <hdf5.h>
#include <cstdio>
#include <vector>
int main(int, char** argv) {
  hid_t in = H5Fopen(argv[1], H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t out = H5Fcreate(argv[2], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  for (const char* name : {"input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids", "next_sentence_labels"}) {
    hid_t d = H5Dopen2(in, name, H5P_DEFAULT);
    hid_t sp = H5Dget_space(d);
    int rank = H5Sget_simple_extent_ndims(sp);
    hsize_t dims[2] = {0, 1};
    H5Sget_simple_extent_dims(sp, dims, nullptr);
    hsize_t n = dims[0] * (rank == 2 ? dims[1] : 1);
    std::vector<int> buf(n);
    H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
    hid_t pl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t chunk[2] = {1024 < dims[0] ? 1024 : dims[0], rank == 2 ? dims[1] : 1};
    H5Pset_chunk(pl, rank, chunk);
    H5Pset_deflate(pl, 6);
    hid_t od = H5Dcreate2(out, name, H5T_STD_I32LE, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
    H5Dwrite(od, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
    H5Dclose(od); H5Pclose(pl); H5Sclose(sp); H5Dclose(d);
  }
  H5Fclose(out); H5Fclose(in);
}
