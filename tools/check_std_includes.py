#!/usr/bin/env python3
"""Every public header includes the standard header of each standard name it uses.

The header self-containment check (tests/headers/CMakeLists.txt) compiles each header on its own
with the standard library precompiled, so it sees whether a header includes the zero headers it
needs, not whether it includes <vector> for std::vector: that is this check's part. It is also
stricter than compiling ever was: libstdc++'s headers include one another, so a header that used
std::min with only <vector> compiled, and would not with another standard library.

    tools/check_std_includes.py [ROOT]    (ROOT: the repository, default: this file's parent's)
    tools/check_std_includes.py --self-test    (the check on texts whose answer is known)

Reads include/zero/**/*.hpp and *.cuh without their comments and string literals, and for each
name of NAMES below that a header uses, requires `#include <its header>` in that header itself (or
one of the headers the standard says also declare that name, ALSO_DECLARED_IN). The table holds
every std:: name zero's headers use, and a few macros (errno and its codes, the limits): a std::
name it does not know fails the check too, asking for it to be added, so nothing std:: goes
unchecked; other macros are not checked. An include inside an #if counts for the whole file.
Prints one line per problem, and exits 1 if there is any.
"""

import pathlib
import re
import sys

# Standard header -> regular expressions of the names it declares (those zero's headers use).
NAMES = {
    "algorithm": [
        r"std::(is_sorted|adjacent_find|search|rotate|partition|nth_element|stable_partition)\b",
        r"std::ranges::(adjacent_find|is_sorted|sort|unique)\b",
        r"std::(sort|stable_sort|min|max|minmax|clamp|fill|fill_n|copy|copy_n|copy_if|find|"
        r"find_if|any_of|all_of|none_of|max_element|min_element|count|count_if|transform|equal|"
        r"lower_bound|upper_bound|reverse|unique|remove_if|for_each)\b",
        r"std::ranges::(sort|fill|copy|find|find_if|any_of|all_of|none_of|max|min|count|equal|"
        r"transform|max_element|min_element|for_each)\b",
    ],
    "array": [r"std::array\b"],
    "atomic": [r"std::atomic(_ref|_flag)?\b", r"std::memory_order"],
    "bit": [
        r"std::(bit_cast|countl_zero|countr_zero|popcount|has_single_bit|bit_ceil|bit_width)\b",
    ],
    "cctype": [r"std::(tolower|toupper|isdigit|isspace|isalpha|isalnum|isprint|isxdigit)\b"],
    "cerrno": [
        r"\berrno\b",
        r"\bE(NOENT|EXIST|INTR|AGAIN|NOSPC|BUSY|INVAL|ACCES|PERM|NOTDIR|ISDIR|ROFS|IO|NOMEM|BADF|"
        r"NOSYS|OPNOTSUPP|XDEV|TIMEDOUT|CANCELED|NOTEMPTY|DQUOT|FBIG|WOULDBLOCK|PIPE|SRCH|CHILD|"
        r"LOOP|NAMETOOLONG|MFILE|NFILE|NXIO|SPIPE|OVERFLOW|RANGE)\b",
    ],
    "charconv": [r"std::(from_chars|to_chars)\b"],
    "chrono": [r"std::chrono\b"],
    "climits": [
        r"\b(CHAR_BIT|INT_MAX|INT_MIN|UINT_MAX|LONG_MAX|ULLONG_MAX|LLONG_MAX|PATH_MAX|IOV_MAX)\b",
    ],
    "cmath": [
        r"std::(cos|sin|tanh|fmod|nan|llround|trunc|signbit|copysign|hypot|nearbyint|rint)\b",
        r"std::(sqrt|fabs|isfinite|isnan|isinf|pow|exp|log|log2|ceil|floor|ldexp|frexp|nextafter|"
        r"round|lround|fma)\b",
    ],
    "compare": [r"std::(strong_ordering|partial_ordering|weak_ordering)\b"],
    "concepts": [
        r"std::(copy_constructible|move_constructible|equality_comparable|totally_ordered)\b",
        r"std::(same_as|convertible_to|integral|floating_point|invocable|derived_from|"
        r"constructible_from|default_initializable|unsigned_integral|signed_integral)\b",
    ],
    "condition_variable": [r"std::condition_variable(_any)?\b"],
    "cstddef": [r"std::(size_t|ptrdiff_t|byte|max_align_t)\b"],
    "cstdint": [
        r"\b(SIZE_MAX|U?INT(8|16|32|64)_(MAX|MIN)|UINTPTR_MAX)\b",
        r"std::u?int(8|16|32|64)_t\b",
        r"std::u?intptr_t\b",
    ],
    "cstdio": [r"std::(printf|fprintf|snprintf|FILE|fopen|fclose|fflush|fputs|puts|fwrite)\b"],
    "cstdlib": [
        r"std::(getenv|abort|exit|strtoull|strtoll|strtol|strtoul|malloc|free|aligned_alloc)\b",
    ],
    "cstring": [
        r"std::(strcmp|strncmp|strchr|strrchr|strncpy)\b",
        r"std::(memcpy|memset|memcmp|memmove|strlen|strerror)\b",
    ],
    "ctime": [r"std::(strftime|time_t|tm|time|localtime_r|gmtime_r)\b"],
    "bitset": [r"std::bitset\b"],
    "deque": [r"std::deque\b"],
    "exception": [
        r"std::uncaught_exceptions\b",
        r"std::(exception_ptr|current_exception|rethrow_exception|make_exception_ptr|exception|"
        r"terminate)\b",
    ],
    "filesystem": [r"std::filesystem\b"],
    "fstream": [r"std::(ofstream|ifstream|fstream)\b"],
    "functional": [
        r"std::(greater|less|plus|minus|multiplies|equal_to|not_equal_to|logical_or|logical_and|"
        r"hash|identity)\b",
        r"std::ranges::(not_equal_to|equal_to|less|greater)\b",
        r"std::(function|reference_wrapper|ref|cref|invoke)\b",
    ],
    "future": [r"std::launch\b", r"std::(future|promise|async|shared_future)\b"],
    "initializer_list": [r"std::initializer_list\b"],
    "ios": [r"std::ios(_base)?\b"],
    "iostream": [r"std::(cout|cerr|clog)\b"],
    "iterator": [
        r"std::(begin|end|size|data|ssize|empty)\b",
        r"std::(next|prev|distance|advance|back_inserter|iterator_traits)\b",
    ],
    "limits": [r"std::numeric_limits\b"],
    "list": [r"std::list\b"],
    "map": [r"std::(multi)?map\b"],
    "memory": [
        r"std::(unique_ptr|shared_ptr|make_unique|make_shared|weak_ptr|addressof|"
        r"enable_shared_from_this)\b",
    ],
    "mutex": [r"std::(mutex|lock_guard|unique_lock|scoped_lock|once_flag|call_once)\b"],
    "new": [r"std::(align_val_t|launder|bad_alloc|nothrow)\b"],
    "numbers": [r"std::numbers::"],
    "numeric": [r"std::(accumulate|iota|reduce|gcd|lcm|inner_product|partial_sum)\b"],
    "optional": [r"std::(optional|nullopt)\b"],
    "ostream": [r"std::ostream\b"],
    "queue": [r"std::(queue|priority_queue)\b"],
    "random": [
        r"std::(mt19937(_64)?|uniform_int_distribution|uniform_real_distribution|"
        r"normal_distribution|random_device)\b",
    ],
    "ranges": [
        r"std::ranges::(contiguous_range|sized_range|range|data|size|begin|end|"
        r"enable_borrowed_range|enable_view|range_reference_t|range_value_t|iterator_t|"
        r"borrowed_range)\b",
        r"std::ranges::(iota_view|subrange|views)\b",
        r"std::views::",
    ],
    "set": [r"std::(multi)?set\b"],
    "span": [r"std::(as_bytes|as_writable_bytes)\b", r"std::span\b", r"std::dynamic_extent\b"],
    "sstream": [r"std::(ostringstream|istringstream|stringstream)\b"],
    "stdexcept": [r"std::(runtime_error|invalid_argument|logic_error|out_of_range|length_error)\b"],
    "string": [r"std::string\b", r"std::(to_string|stoi|stol|stoul|stoull|getline)\b"],
    "string_view": [r"std::string_view\b"],
    "system_error": [r"std::(system_error|error_code|system_category|generic_category|errc)\b"],
    "thread": [r"std::(thread|jthread)\b", r"std::this_thread\b"],
    "tuple": [r"std::get\b", r"std::(tuple|apply|tie|make_tuple|tuple_size|tuple_element)\b"],
    "type_traits": [
        r"std::(remove_cv|remove_pointer|add_const|add_pointer|is_reference|is_array|is_class|"
        r"is_empty|is_standard_layout|is_trivial|aligned_storage)(_v|_t)?\b",
        r"std::(is_same|enable_if|conditional|remove_cvref|is_trivially_copyable|decay|"
        r"is_integral|is_floating_point|underlying_type|is_const|remove_const|integral_constant|"
        r"true_type|false_type|is_signed|make_unsigned|is_void|is_enum|remove_reference|"
        r"is_invocable|invoke_result|is_pointer|is_arithmetic|is_unsigned|is_nothrow_[a-z_]+|"
        r"is_base_of|is_convertible|type_identity|common_type)(_v|_t)?\b",
    ],
    "unordered_map": [r"std::unordered_map\b"],
    "unordered_set": [r"std::unordered_set\b"],
    "utility": [
        r"std::(in_range|cmp_less|cmp_equal)\b",
        r"std::(move|forward|pair|exchange|swap|declval|index_sequence|make_index_sequence|"
        r"in_place|as_const|to_underlying|unreachable)\b",
    ],
    "variant": [r"std::(variant|visit|holds_alternative|monostate|get_if)\b"],
    "vector": [r"std::(erase|erase_if)\b", r"std::vector\b"],
}

# Names the standard (or POSIX, for the macros) declares in more than one header: where a name
# matches one of these, any of the headers listed will do as well as its own.
ALSO_DECLARED_IN = [
    (r"std::size_t\b", ["cstdio", "cstdlib", "cstring", "ctime", "cwchar"]),
    (r"std::(begin|end|size|data|ssize|empty|erase|erase_if)\b",
     ["array", "deque", "list", "map", "set", "span", "string", "string_view", "unordered_map",
      "unordered_set", "vector"]),
    (r"std::ranges::(size|data|begin|end)\b", ["iterator"]),
    (r"std::(tuple_size|tuple_element|get)\b", ["array", "utility", "ranges", "variant"]),
    (r"std::hash\b", ["string", "string_view", "memory", "optional", "variant", "thread",
                      "system_error", "vector", "typeindex"]),
    (r"std::ios(_base)?\b", ["fstream", "iostream", "sstream", "istream", "ostream"]),
    (r"\berrno\b|\bE[A-Z]+\b", ["errno.h"]),
    (r"\b(SIZE_MAX|U?INT(8|16|32|64)_(MAX|MIN)|UINTPTR_MAX)\b", ["stdint.h"]),
    (r"\b[A-Z]+_MAX\b|\b[A-Z]+_MIN\b|\bCHAR_BIT\b", ["limits.h"]),
]
ALSO_COMPILED = [(re.compile(p), set(headers)) for p, headers in ALSO_DECLARED_IN]

COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')
INCLUDE = re.compile(r"#\s*include\s*<([a-z_.]+)>")
STD_NAME = re.compile(r"std::(?:[a-z_0-9]+::)*[A-Za-z_0-9]+")
COMPILED = {header: [re.compile(p) for p in patterns] for header, patterns in NAMES.items()}


def missing_includes(text):
    """(name used, header) for each standard header a header's text needs and does not include,
    and (name, None) for each std:: name the table does not know."""
    code = STRING.sub('""', COMMENT.sub("", text))
    included = set(INCLUDE.findall(code))
    missing = []
    for header, patterns in COMPILED.items():
        if header in included:
            continue
        for pattern in patterns:
            needs_it = [used.group(0) for used in pattern.finditer(code)
                        if not any(also.match(used.group(0)) and included & headers
                                   for also, headers in ALSO_COMPILED)]
            if needs_it:
                missing.append((needs_it[0], header))
                break
    known = [p for patterns in COMPILED.values() for p in patterns]
    for name in sorted(set(STD_NAME.findall(code))):
        if not any(p.match(name) for p in known):
            missing.append((name, None))
    return missing


def self_test():
    """The check on small texts whose answer is known: it finds, and it does not invent."""
    cases = [
        ("#include <cstddef>\nstd::vector<int> v;", [("std::vector", "vector")]),
        ("#include <vector>\nstd::vector<int> v;", []),
        ("// std::vector in a comment\n/* std::min */ int x;", []),
        ('const char* s = "std::mutex";', []),
        ("#include <cstring>\nstd::size_t n;", []),  # <cstring> declares std::size_t too
        ("std::size_t n; auto m = std::move(n);",
         [("std::size_t", "cstddef"), ("std::move", "utility")]),
        ("#include <concepts>\ntemplate <std::same_as<int> T> void f();", []),
        ("bool b = std::is_same_v<int, long>;", [("std::is_same_v", "type_traits")]),
        # An alternative header stands in for one name, not for its whole header.
        ("#include <cstdio>\nstd::byte b;", [("std::byte", "cstddef")]),
        ("#include <utility>\nstd::tuple<int> t;", [("std::tuple", "tuple")]),
        ("#include <utility>\nstd::tuple_size<P> s;", []),
        ("int e = errno;", [("errno", "cerrno")]),
        ("#include <cerrno>\nint e = ENOENT;", []),
        ("std::frobnicate(x);", [("std::frobnicate", None)]),
    ]
    failed = 0
    for text, expected in cases:
        got = sorted(missing_includes(text), key=str)
        if got != sorted(expected, key=str):
            print(f"check_std_includes --self-test: {text!r}: found {got}, expected {expected}",
                  file=sys.stderr)
            failed += 1
    print(f"check_std_includes --self-test: {len(cases) - failed} of {len(cases)} cases right")
    return 1 if failed else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1])
    include = root / "include"
    headers = sorted([*include.rglob("*.hpp"), *include.rglob("*.cuh")])
    if not headers:
        print(f"check_std_includes: no headers under {include}", file=sys.stderr)
        return 2
    found = 0
    for path in headers:
        for name, header in missing_includes(path.read_text()):
            if header:
                print(f"{path.relative_to(root)}: uses {name} but does not #include <{header}>")
            else:
                print(f"{path.relative_to(root)}: uses {name}, which the table of "
                      f"tools/check_std_includes.py does not know: add it to NAMES")
            found += 1
    if found:
        print(f"check_std_includes: {found} missing standard includes in {len(headers)} headers",
              file=sys.stderr)
        return 1
    print(f"check_std_includes: every standard name in {len(headers)} headers has its include")
    return 0


if __name__ == "__main__":
    sys.exit(main())
