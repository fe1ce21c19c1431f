// Preloaded into the sanitize preset's tests (LD_PRELOAD, CMakePresets.json): dlclose does nothing.
// Open MPI unloads its plugins (mca_*.so) in MPI_Finalize, before LeakSanitizer reports at exit;
// what they allocated then shows as "<unknown module>", which no suppression can name, and the
// fast unwinder LeakSanitizer needs to stay fast cannot see past it. With the plugins kept loaded,
// tests/lsan.supp names Open MPI's own allocations by library and every other leak is reported.

extern "C" int dlclose(void* /*handle*/) {
  return 0;
}
