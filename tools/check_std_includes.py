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
one of the few headers the standard says also declare it). Prints one line per missing include,
and exits 1 if there is any. The table holds the names zero uses; a name it lacks is not checked,
so add names here as the headers start to use them.
"""

import pathlib
import re
import sys

# Standard header -> regular expressions of the names it declares (those zero's headers use).
NAMES = {
    "algorithm": [r"std::(sort|stable_sort|min|max|minmax|clamp|fill|fill_n|copy|copy_n|copy_if|"
                  r"find|find_if|any_of|all_of|none_of|max_element|min_element|count|count_if|"
                  r"transform|equal|lower_bound|upper_bound|reverse|unique|remove_if|for_each)\b",
                  r"std::ranges::(sort|fill|copy|find|find_if|any_of|all_of|none_of|max|min|count|"
                  r"equal|transform|max_element|min_element|for_each)\b"],
    "array": [r"std::array\b"],
    "atomic": [r"std::atomic(_ref|_flag)?\b", r"std::memory_order"],
    "bit": [r"std::(bit_cast|countl_zero|countr_zero|popcount|has_single_bit|bit_ceil|bit_width)\b"],
    "chrono": [r"std::chrono\b"],
    "cmath": [r"std::(sqrt|fabs|isfinite|isnan|isinf|pow|exp|log|log2|ceil|floor|ldexp|frexp|"
              r"nextafter|round|lround|fma)\b"],
    "compare": [r"std::(strong_ordering|partial_ordering|weak_ordering)\b"],
    "concepts": [r"std::(same_as|convertible_to|integral|floating_point|invocable|derived_from|"
                 r"constructible_from|default_initializable|unsigned_integral|signed_integral)\b"],
    "condition_variable": [r"std::condition_variable(_any)?\b"],
    "cstddef": [r"std::(size_t|ptrdiff_t|byte|max_align_t)\b"],
    "cstdint": [r"std::u?int(8|16|32|64)_t\b", r"std::u?intptr_t\b"],
    "cstdio": [r"std::(printf|fprintf|snprintf|FILE|fopen|fclose|fflush|fputs|puts|fwrite)\b"],
    "cstdlib": [r"std::(getenv|abort|exit|strtoull|strtoll|strtol|strtoul|malloc|free|"
                r"aligned_alloc)\b"],
    "cstring": [r"std::(memcpy|memset|memcmp|memmove|strlen|strerror)\b"],
    "deque": [r"std::deque\b"],
    "exception": [r"std::(exception_ptr|current_exception|rethrow_exception|make_exception_ptr|"
                  r"exception|terminate)\b"],
    "filesystem": [r"std::filesystem\b"],
    "fstream": [r"std::(ofstream|ifstream|fstream)\b"],
    "functional": [r"std::(function|reference_wrapper|ref|cref|invoke)\b"],
    "future": [r"std::(future|promise|async|shared_future)\b"],
    "initializer_list": [r"std::initializer_list\b"],
    "iostream": [r"std::(cout|cerr|clog)\b"],
    "iterator": [r"std::(next|prev|distance|advance|back_inserter|iterator_traits)\b"],
    "limits": [r"std::numeric_limits\b"],
    "list": [r"std::list\b"],
    "map": [r"std::(multi)?map\b"],
    "memory": [r"std::(unique_ptr|shared_ptr|make_unique|make_shared|weak_ptr|addressof|"
               r"enable_shared_from_this)\b"],
    "mutex": [r"std::(mutex|lock_guard|unique_lock|scoped_lock|once_flag|call_once)\b"],
    "new": [r"std::(align_val_t|launder|bad_alloc|nothrow)\b"],
    "numbers": [r"std::numbers::"],
    "numeric": [r"std::(accumulate|iota|reduce|gcd|lcm|inner_product|partial_sum)\b"],
    "optional": [r"std::(optional|nullopt)\b"],
    "ostream": [r"std::ostream\b"],
    "queue": [r"std::(queue|priority_queue)\b"],
    "random": [r"std::(mt19937(_64)?|uniform_int_distribution|uniform_real_distribution|"
               r"normal_distribution|random_device)\b"],
    "ranges": [r"std::ranges::(iota_view|subrange|views)\b", r"std::views::"],
    "set": [r"std::(multi)?set\b"],
    "span": [r"std::span\b", r"std::dynamic_extent\b"],
    "sstream": [r"std::(ostringstream|istringstream|stringstream)\b"],
    "stdexcept": [r"std::(runtime_error|invalid_argument|logic_error|out_of_range|length_error)\b"],
    "string": [r"std::string\b", r"std::(to_string|stoi|stol|stoul|stoull|getline)\b"],
    "string_view": [r"std::string_view\b"],
    "system_error": [r"std::(system_error|error_code|system_category|generic_category|errc)\b"],
    "thread": [r"std::(thread|jthread)\b", r"std::this_thread\b"],
    "tuple": [r"std::(tuple|apply|tie|make_tuple|tuple_size|tuple_element)\b"],
    "type_traits": [r"std::(is_same|enable_if|conditional|remove_cvref|is_trivially_copyable|decay|"
                    r"is_integral|is_floating_point|underlying_type|is_const|remove_const|"
                    r"integral_constant|true_type|false_type|is_signed|make_unsigned|is_void|"
                    r"is_enum|remove_reference|is_invocable|invoke_result|is_pointer|"
                    r"is_arithmetic|is_unsigned|is_nothrow_[a-z_]+|is_base_of|is_convertible|"
                    r"type_identity|common_type)(_v|_t)?\b"],
    "unordered_map": [r"std::unordered_map\b"],
    "unordered_set": [r"std::unordered_set\b"],
    "utility": [r"std::(move|forward|pair|exchange|swap|declval|index_sequence|"
                r"make_index_sequence|in_place|as_const|to_underlying|unreachable)\b"],
    "variant": [r"std::(variant|visit|holds_alternative|monostate|get_if)\b"],
    "vector": [r"std::vector\b"],
}

# Names the standard declares in more than one header: including any of these headers will do.
ALSO_DECLARED_IN = {
    "cstddef": ["cstdio", "cstdlib", "cstring", "ctime", "cwchar"],  # std::size_t
    "cstdint": ["cinttypes"],
    "tuple": ["array", "utility", "ranges"],  # std::tuple_size, std::tuple_element
}

COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')
INCLUDE = re.compile(r"#\s*include\s*<([a-z_]+)>")
COMPILED = {header: [re.compile(p) for p in patterns] for header, patterns in NAMES.items()}


def missing_includes(text):
    """(name used, header) for each standard header a header's text needs and does not include."""
    code = STRING.sub('""', COMMENT.sub("", text))
    included = set(INCLUDE.findall(code))
    missing = []
    for header, patterns in COMPILED.items():
        if header in included or included & set(ALSO_DECLARED_IN.get(header, [])):
            continue
        for pattern in patterns:
            used = pattern.search(code)
            if used:
                missing.append((used.group(0), header))
                break
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
    ]
    failed = 0
    for text, expected in cases:
        got = sorted(missing_includes(text), key=lambda pair: pair[1])
        if got != sorted(expected, key=lambda pair: pair[1]):
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
            print(f"{path.relative_to(root)}: uses {name} but does not #include <{header}>")
            found += 1
    if found:
        print(f"check_std_includes: {found} missing standard includes in {len(headers)} headers",
              file=sys.stderr)
        return 1
    print(f"check_std_includes: every standard name in {len(headers)} headers has its include")
    return 0


if __name__ == "__main__":
    sys.exit(main())
