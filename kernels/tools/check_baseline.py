"""Checks that a binary's code outside the per-path kernel copies is baseline x86-64.

The CPU kernels are compiled once per kernel path (kernels/cpu_isa.h), each
copy in namespace kvlab::isa_avx2 or kvlab::isa_avx512 (and isa_scalar); the
rest of the build must use only baseline x86-64 instructions (SSE2), or the
binary could die with an illegal instruction on an older host before the
dispatcher is asked. This disassembles the binary (objdump -d -C) and reports
every function outside the avx2 / avx512 copies that uses an instruction
beyond baseline: any VEX / EVEX encoding (AVX, AVX2, FMA, F16C, AVX-512),
ymm / zmm / mask registers, SSE3..SSE4.2, and BMI / LZCNT / POPCNT / MOVBE.

  python3 kernels/tools/check_baseline.py build/kvlab [more binaries]

Exit 0 when clean (it prints how many functions it checked, and how many
inside the copies use those instructions); 1 with the offenders listed.
"""
import re
import subprocess
import sys

ALLOWED = ("isa_avx2::", "isa_avx512::")  # the per-path copies the dispatcher guards
# Baseline x86-64 has SSE and SSE2; these mnemonics (AT&T, as objdump prints
# them) need SSE3 or later, or one of the bit-manipulation extensions.
BEYOND = set("""
addsubps addsubpd haddps haddpd hsubps hsubpd lddqu movddup movshdup movsldup
pabsb pabsw pabsd palignr phaddw phaddd phaddsw phsubw phsubd phsubsw pmaddubsw pmulhrsw pshufb psignb psignw psignd
blendpd blendps blendvpd blendvps dppd dpps extractps insertps movntdqa mpsadbw packusdw pblendvb pblendw pcmpeqq
pextrb pextrd pextrq phminposuw pinsrb pinsrd pinsrq pmaxsb pmaxsd pmaxud pmaxuw pminsb pminsd pminud pminuw
pmovsxbw pmovsxbd pmovsxbq pmovsxwd pmovsxwq pmovsxdq pmovzxbw pmovzxbd pmovzxbq pmovzxwd pmovzxwq pmovzxdq
pmuldq pmulld ptest roundps roundpd roundss roundsd
pcmpestri pcmpestrm pcmpistri pcmpistrm pcmpgtq crc32 crc32b crc32w crc32l crc32q
popcnt lzcnt tzcnt andn bextr blsi blsmsk blsr bzhi mulx pdep pext rorx sarx shlx shrx movbe adcx adox
""".split())
FUNC = re.compile(r"^[0-9a-f]+ <(.*)>:$")
INSN = re.compile(r"^\s+[0-9a-f]+:\s+(\S+)\s*(.*)$")
WIDE_REG = re.compile(r"%(ymm|zmm)\d+|%k[0-7]\b")


def beyond_baseline(mnemonic, operands):
    m = mnemonic.split(".")[0]
    base = m.rstrip("bwlq") if m not in BEYOND else m
    if m.startswith("v") and m not in ("verr", "verw"):
        return True
    if m in BEYOND or base in BEYOND:
        return True
    return bool(WIDE_REG.search(operands))


def check(path):
    out = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", path], check=True, capture_output=True,
                         text=True).stdout
    name, funcs, inside, offenders = None, 0, 0, {}
    counted = set()
    for line in out.splitlines():
        f = FUNC.match(line)
        if f:
            name = f.group(1)
            funcs += 1
            continue
        i = INSN.match(line)
        if not i or name is None or not beyond_baseline(i.group(1), i.group(2)):
            continue
        if any(a in name for a in ALLOWED):
            if name not in counted:
                counted.add(name)
                inside += 1
            continue
        offenders.setdefault(name, i.group(1) + " " + i.group(2))
    print(f"{path}: {funcs} functions; {inside} inside the avx2/avx512 copies use AVX or later; "
          f"{len(offenders)} outside them do")
    for n, insn in list(offenders.items())[:20]:
        print(f"  {n}: {insn}")
    return not offenders


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    ok = all([check(p) for p in argv[1:]])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
