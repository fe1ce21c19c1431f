// Preloaded into the sanitize preset's tests (LD_PRELOAD, CMakePresets.json): dlclose does nothing.
// Open MPI unloads its plugins (mca_*.so) in MPI_Finalize, before LeakSanitizer reports at exit;
// what they allocated then shows as "<unknown module>", which no suppression can name, and the
// fast unwinder LeakSanitizer needs to stay fast cannot see past it. With the plugins kept loaded,
// a leak through a plugin is reported with the plugin's functions, and tests/lsan.supp can name
// the few functions of MPI's own threads whose allocations it suppresses.

extern "C" int dlclose(void* /*handle*/) {
  return 0;
}
