/* bcryptprimitives.dll for Wine 8, which lacks it. Go 1.24+ programs for Windows call its
   ProcessPrng at start-up (Windows 10 and 11 have the DLL); this one fills the buffer from
   RtlGenRandom, the random source Wine does have. Only CI's Wine prefix gets it: see
   scripts/wine/exec.sh. */
#include <windows.h>
#include <ntsecapi.h>

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
  while (len > 0) {
    ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
    if (!RtlGenRandom(data, n)) return FALSE;
    data += n;
    len -= n;
  }
  return TRUE;
}
