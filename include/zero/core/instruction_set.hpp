#pragma once
// ZERO_INSTRUCTION_SET: a name for the instruction sets that zero's host loops are compiled for
// in this translation unit (zero/core/simd.hpp, convert.hpp and stream_copy.hpp choose their code
// by them), for the inline namespace that zero::Engine is declared in. An engine compiled into a
// library with other instruction sets than the unit that names it then has another name: the unit
// fails to link (an undefined zero::avx2::Engine<...> where the library holds zero::avx512::
// Engine<...>) instead of mixing two compilations of the same inline functions, one of which may
// not run on the machine, or round differently (FMA contraction). docs/compiled-engines.md.
//
//   avx512    AVX-512 F, BW, VL and DQ with AVX2, FMA and F16C (simd.hpp's 16 lanes)
//   avx2      AVX2, FMA and F16C without AVX-512F (8 lanes)
//   baseline  none of AVX, AVX2, FMA, F16C or AVX-512F (scalar loops)
//   isa_...   any other mix, one digit per set: AVX AVX2 FMA F16C AVX512F BW VL DQ
// Code built with -ffast-math (__FAST_MATH__) rounds otherwise: its names end in _fast_math.

#if defined(__AVX__)
#define ZERO_ISA_HAS_AVX 1
#else
#define ZERO_ISA_HAS_AVX 0
#endif
#if defined(__AVX2__)
#define ZERO_ISA_HAS_AVX2 1
#else
#define ZERO_ISA_HAS_AVX2 0
#endif
#if defined(__FMA__)
#define ZERO_ISA_HAS_FMA 1
#else
#define ZERO_ISA_HAS_FMA 0
#endif
#if defined(__F16C__)
#define ZERO_ISA_HAS_F16C 1
#else
#define ZERO_ISA_HAS_F16C 0
#endif
#if defined(__AVX512F__)
#define ZERO_ISA_HAS_AVX512F 1
#else
#define ZERO_ISA_HAS_AVX512F 0
#endif
#if defined(__AVX512BW__)
#define ZERO_ISA_HAS_AVX512BW 1
#else
#define ZERO_ISA_HAS_AVX512BW 0
#endif
#if defined(__AVX512VL__)
#define ZERO_ISA_HAS_AVX512VL 1
#else
#define ZERO_ISA_HAS_AVX512VL 0
#endif
#if defined(__AVX512DQ__)
#define ZERO_ISA_HAS_AVX512DQ 1
#else
#define ZERO_ISA_HAS_AVX512DQ 0
#endif

#define ZERO_ISA_PASTE(a, b) a##b
#define ZERO_ISA_NAME(a, b) ZERO_ISA_PASTE(a, b)
#define ZERO_ISA_DIGITS_PASTE(a, b, c, d, e, f, g, h) isa_##a##b##c##d##e##f##g##h
#define ZERO_ISA_DIGITS(a, b, c, d, e, f, g, h) ZERO_ISA_DIGITS_PASTE(a, b, c, d, e, f, g, h)

#if ZERO_ISA_HAS_AVX512F && ZERO_ISA_HAS_AVX512BW && ZERO_ISA_HAS_AVX512VL &&                      \
    ZERO_ISA_HAS_AVX512DQ && ZERO_ISA_HAS_AVX2 && ZERO_ISA_HAS_FMA && ZERO_ISA_HAS_F16C
#define ZERO_ISA_SETS avx512
#elif ZERO_ISA_HAS_AVX2 && ZERO_ISA_HAS_FMA && ZERO_ISA_HAS_F16C && !ZERO_ISA_HAS_AVX512F
#define ZERO_ISA_SETS avx2
#elif !ZERO_ISA_HAS_AVX && !ZERO_ISA_HAS_AVX2 && !ZERO_ISA_HAS_FMA && !ZERO_ISA_HAS_F16C &&        \
    !ZERO_ISA_HAS_AVX512F
#define ZERO_ISA_SETS baseline
#else
#define ZERO_ISA_SETS                                                                              \
  ZERO_ISA_DIGITS(ZERO_ISA_HAS_AVX, ZERO_ISA_HAS_AVX2, ZERO_ISA_HAS_FMA, ZERO_ISA_HAS_F16C,        \
                  ZERO_ISA_HAS_AVX512F, ZERO_ISA_HAS_AVX512BW, ZERO_ISA_HAS_AVX512VL,              \
                  ZERO_ISA_HAS_AVX512DQ)
#endif

#if defined(__FAST_MATH__)
#define ZERO_INSTRUCTION_SET ZERO_ISA_NAME(ZERO_ISA_SETS, _fast_math)
#else
#define ZERO_INSTRUCTION_SET ZERO_ISA_SETS
#endif
