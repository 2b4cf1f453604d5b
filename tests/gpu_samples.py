"""Real nvidia-smi and kernel-log text (reference/formats.md 7.x, H100 capture) for GPU tests."""

H100_Q = """
==============NVSMI LOG==============

Timestamp                                              : Tue Jul 14 08:12:53 2026
Driver Version                                         : 590.48.01
CUDA Version                                           : 13.1

Attached GPUs                                          : 1
GPU 00000000:00:09.0
    Product Name                                       : NVIDIA H100 80GB HBM3
    Product Brand                                      : NVIDIA
    Serial Number                                      : 0000000000000
    GPU UUID                                           : GPU-00000000-0000-0000-0000-000000000000
    Minor Number                                       : 0
    PCI
        Bus                                            : 0x00
        Device                                         : 0x09
        Domain                                         : 0x0000
        Bus Id                                         : 00000000:00:09.0
        GPU Link Info
            PCIe Generation
                Max                                    : 5
                Current                                : 5
        Replays Since Reset                            : 9
        Replay Number Rollovers                        : 0
        Tx Throughput                                  : 3092 KB/s
    Fan Speed                                          : N/A
    Performance State                                  : P0
    Clocks Event Reasons
        Idle                                           : Not Active
        Applications Clocks Setting                    : Not Active
        SW Power Cap                                   : Not Active
        HW Slowdown                                    : Not Active
            HW Thermal Slowdown                        : Not Active
            HW Power Brake Slowdown                    : Not Active
        Sync Boost                                     : Not Active
        SW Thermal Slowdown                            : Not Active
        Display Clock Setting                          : Not Active
    Clocks Event Reasons Counters
        SW Power Capping                               : 0 us
        Sync Boost                                     : 0 us
        SW Thermal Slowdown                            : 0 us
        HW Thermal Slowdown                            : 0 us
        HW Power Braking                               : 0 us
    FB Memory Usage
        Total                                          : 81559 MiB
        Reserved                                       : 479 MiB
        Used                                           : 18351 MiB
        Free                                           : 62729 MiB
    BAR1 Memory Usage
        Total                                          : 131072 MiB
        Used                                           : 1 MiB
        Free                                           : 131071 MiB
    Utilization
        GPU                                            : 100 %
        Memory                                         : 10 %
        Encoder                                        : 0 %
        Decoder                                        : 0 %
    ECC Errors
        Volatile
            SRAM Correctable                           : 0
            SRAM Uncorrectable Parity                  : 0
            SRAM Uncorrectable SEC-DED                 : 0
            DRAM Correctable                           : 0
            DRAM Uncorrectable                         : 0
        Aggregate
            SRAM Correctable                           : 0
            SRAM Uncorrectable Parity                  : 0
            SRAM Uncorrectable SEC-DED                 : 0
            DRAM Correctable                           : 0
            DRAM Uncorrectable                         : 0
            SRAM Threshold Exceeded                    : No
        Aggregate Uncorrectable SRAM Sources
            SRAM L2                                    : 0
        Channel Repair Pending                         : No
    Retired Pages
        Single Bit ECC                                 : N/A
        Double Bit ECC                                 : N/A
        Pending Page Blacklist                         : N/A
    Remapped Rows
        Correctable Error                              : 0
        Uncorrectable Error                            : 0
        Pending                                        : No
        Remapping Failure Occurred                     : No
        Bank Remap Availability Histogram
            Max                                        : 2560 bank(s)
    Temperature
        GPU Current Temp                               : 59 C
        GPU T.Limit Temp                               : 26 C
        GPU Shutdown T.Limit Temp                      : -8 C
        GPU Slowdown T.Limit Temp                      : -2 C
        Memory Current Temp                            : 55 C
    GPU Power Readings
        Average Power Draw                             : 629.45 W
        Instantaneous Power Draw                       : 588.39 W
        Current Power Limit                            : 700.00 W
    GPU Memory Power Readings 
        Average Power Draw                             : 85.83 W
    Clocks
        Graphics                                       : 1980 MHz
        SM                                             : 1980 MHz
        Memory                                         : 2619 MHz
    Max Clocks
        Graphics                                       : 1980 MHz
        SM                                             : 1980 MHz
    Fabric
        State                                          : Completed
        Status                                         : Success
    Processes
        GPU instance ID                   : N/A
        Process ID                        : 11327
            Type                          : C
            Name                          : /root/tools/memhog
            Used GPU Memory               : 2566 MiB
"""

# Pre-535 layout (kubeflow/kubeflow#68, NVIDIA/dcgm-exporter#16), V100-era ECC sections.
OLD_Q = """==============NVSMI LOG==============

Timestamp                           : Fri Jan  5 10:11:12 2024
Driver Version                      : 450.51.06
CUDA Version                        : 11.0

Attached GPUs                       : 2
GPU 00000000:1A:00.0
    Product Name                    : Tesla V100-SXM2-32GB
    GPU UUID                        : GPU-a6158b59-2c1e-1e63-0068-9178c4298abd
    Clocks Throttle Reasons
        Idle                        : Not Active
        Applications Clocks Setting : Not Active
        SW Power Cap                : Not Active
        HW Slowdown                 : Active
            HW Thermal Slowdown     : Active
            HW Power Brake Slowdown : Not Active
    FB Memory Usage
        Total                       : 32510 MiB
        Used                        : 30000 MiB
    Utilization
        Gpu                         : 97 %
        Memory                      : 40 %
    ECC Errors
        Volatile
            Single Bit            
                Device Memory             : 3
                Register File             : 0
                L1 Cache                  : N/A
                Total                     : 3
            Double Bit            
                Device Memory             : 1
                Register File             : 0
                L1 Cache                  : N/A
                Total                     : 1
        Aggregate
            Single Bit            
                Total                     : 12
            Double Bit            
                Total                     : 2
    Retired Pages
        Single Bit ECC                    : 0
        Double Bit ECC                    : 1
        Pending Page Blacklist            : Yes
    Remapped Rows                         : N/A
    Temperature
        GPU Current Temp                  : 86 C
        GPU Shutdown Temp                 : 85 C
        GPU Slowdown Temp                 : 82 C
    Power Readings
        Power Management                  : Supported
        Power Draw                        : 251.33 W
        Power Limit                       : 300.00 W
    Clocks
        Graphics                    : 1080 MHz
        SM                          : 1080 MHz
GPU 00000000:1B:00.0
    Product Name                    : Tesla V100-SXM2-32GB
    Clocks Throttle Reasons
        Idle                        : Not Active
        HW Slowdown                 : Not Active
            HW Thermal Slowdown     : Not Active
    Utilization
        Gpu                         : 99 %
        Memory                      : 41 %
    Temperature
        GPU Current Temp                  : 61 C
    Power Readings
        Power Draw                        : 280.10 W
        Power Limit                       : 300.00 W
    Clocks
        SM                          : 1530 MHz
"""

CSV_H100_APPS = """timestamp, gpu_name, gpu_bus_id, gpu_serial, gpu_uuid, pid, process_name, used_gpu_memory [MiB]
2026/07/14 08:12:53.500, NVIDIA H100 80GB HBM3, 00000000:00:09.0, 0000000000000, GPU-00000000-0000-0000-0000-000000000000, 11345, ./gpu_burn, 15690 MiB
"""

# Driver-465 header with old names (nvidia_gpu_exporter samples/output_ubuntu_20.04_v465.27.txt), cut to fit.
CSV_465 = """timestamp, driver_version, count, name, serial, uuid, pci.bus_id, fan.speed [%], pstate, clocks_throttle_reasons.supported, clocks_throttle_reasons.active, clocks_throttle_reasons.gpu_idle, clocks_throttle_reasons.hw_slowdown, memory.total [MiB], memory.used [MiB], memory.free [MiB], temperature.gpu, power.draw [W], power.limit [W], utilization.gpu [%], clocks.current.sm [MHz]
2021/06/10 00:55:54.492, 465.27, 1, NVIDIA GeForce RTX 2080 SUPER, [N/A], GPU-df6e7a7c-7314-46f8-abc4-b88b36dcf3aa, 00000000:0C:00.0, 0 %, P8, 0x00000000000001FF, 0x0000000000000001, Active, Not Active, 7982 MiB, 537 MiB, 7445 MiB, 41, 9.47 W, 250.00 W, 3 %, 300 MHz
2021/06/10 00:55:55.492, 465.27, 1, NVIDIA GeForce RTX 2080 SUPER, [N/A], GPU-df6e7a7c-7314-46f8-abc4-b88b36dcf3aa, 00000000:0C:00.0, 0 %, P2, 0x00000000000001FF, 0x0000000000000048, Not Active, Active, 7982 MiB, 7537 MiB, 445 MiB, 88, 240.10 W, 250.00 W, 100 %, 1350 MHz
"""

CSV_NOUNITS_NOHEADER = """2024/01/05 10:11:12.345, 0, 00000000:2B:00.0, 63, 631.20, 700.00, 100, 1980
2024/01/05 10:11:12.351, 1, 00000000:9B:00.0, [N/A], [Not Supported], 700.00, 99, 1980
"""

DMON_H100 = """# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk 
# Idx      W      C      C      %      %      %      %      %      %    MHz    MHz 
    0    631     63     57    100     10      0      0      0      0   2619   1980 
    0    634     63     58    100     10      0      0      0      0   2619   1980 
"""

DMON_OLD = """# gpu   pwr  temp    sm   mem   enc   dec  mclk  pclk pviol tviol    fb  bar1 sbecc dbecc   pci rxpci txpci
# Idx     W     C     %     %     %     %   MHz   MHz     %  bool    MB    MB  errs  errs  errs  MB/s  MB/s
    0   111    83    25     7     0     0  4513  1683     0     0 11651     2     -     -     0    41     8
"""

PMON_H100 = """# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command 
# Idx           #    C/G      %      %      %      %      %      %    name 
    0      11327     C      -      -      -      -      -      -    memhog         
    0      11345     C     99     10      -      -      -      -    gpu_burn       
"""

TOPO_H100 = "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\nGPU0\t X \t0-19\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n"

KERNEL_LINES = """[31543.449440] NVRM: GPU at PCI:0000:01:00: GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d
[31543.449443] NVRM: Xid (PCI:0000:01:00): 31, Ch 0000003a, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ 0x17_00592000. Fault is of type FAULT_PDE ACCESS_TYPE_READ
[31609.615232] NVRM: Xid (PCI:0000:01:00): 13, Graphics Exception: ESR 0x404000=0x80000002
"""

KERNEL_DMESG_T = """[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter
[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005
"""

KERNEL_SYSLOG = """May 18 19:02:39 kernel: NVRM: GPU at PCI:0000:2b:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae
May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.
May 18 19:02:39 kernel: NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.
"""

KERNEL_MISC = """[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).
192.168.11.119: kern: warning: [2026-04-22T21:30:51.870495804Z]: NVRM: Xid (PCI:0000:0b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)
NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.
NVRM: Xid (PCI:0000:9b:00): 94, pid=1234, name=python3, Contained ECC error
NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)
"""

KERNEL_OOM = """[441280.839852] Out of memory: Killed process 698405 (python) total-vm:49978204kB, anon-rss:12918388kB, file-rss:68668kB, shmem-rss:53352kB, UID:1000 pgtables:49772kB oom_score_adj:0
[441281.626336] oom_reaper: reaped process 698405 (python), now anon-rss:0kB, file-rss:68664kB, shmem-rss:53172kB
2024-04-29T14:55:41,679700+02:00 Out of memory: Killed process 1440763 (perl) total-vm:87033376kB, anon-rss:60356340kB, file-rss:0kB, shmem-rss:0kB, UID:21417 pgtables:169956kB oom_score_adj:0
"""
