#!/usr/bin/env python3
"""Write the synthetic seed corpora of the EPW and trace fuzz targets.

The seeds only have the shape of the real files (EPW header records and hourly data rows; the
Helios, Alibaba pod, duty-cycle and Zeus CSV columns); every value is made up here, so no data
from ../shared/data is copied into the repository. Run from fuzz/: ./make-seeds.py
"""
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def epw(name, lat, mean_c, swing_c, rh, hours):
    lines = [
        f"LOCATION,{name},-,XXX,Synthetic,000000,{lat:.2f},0.00,0.0,100.0",
        "DESIGN CONDITIONS,0",
        "TYPICAL/EXTREME PERIODS,0",
        "GROUND TEMPERATURES,0",
        "HOLIDAYS/DAYLIGHT SAVINGS,No,0,0,0",
        "COMMENTS 1,synthetic weather for fuzzing",
        "COMMENTS 2,",
        "DATA PERIODS,1,1,Data,Sunday, 1/ 1,12/31",
    ]
    for k in range(hours):
        day, hour = divmod(k, 24)
        t = mean_c + swing_c * math.sin(2 * math.pi * (hour - 9) / 24)
        dew = t - 8.0
        ghi = max(0, int(800 * math.sin(math.pi * (hour - 6) / 12))) if 6 <= hour <= 18 else 0
        row = [1999, 1, 1 + day, hour + 1, 60, "?9?9?9?9E0?9?9?9?9?9?9?9?9?9?9?9?9?9?9?9*9*9?9?9?9",
               f"{t:.1f}", f"{dew:.1f}", rh, 101325, 0, 1415, 300, ghi, 0, 0, 0, 0, 0, 0,
               180, 3.0, 5, 5, 20.0, 77777, 9, 999999999, 0, 0.1, 0, 88, 0.0, 0.0, 0.0]
        lines.append(",".join(str(x) for x in row))
    return "\n".join(lines) + "\n"


def helios(rows):
    head = ("time,total_job_num,running_job_num,pending_job_num,total_gpujob_num,running_gpujob_num,"
            "pending_gpujob_num,total_gpu_num,running_gpu_num,pending_gpu_num,idle_gpu_num,gpu_utilization,"
            "running_gpu_num_noless_8,running_gpu_num_less_8,pending_gpu_num_noless_8,pending_gpu_num_less_8,"
            "total_gpu_num_noless_8,total_gpu_num_less_8,running_job_num_noless_8,running_job_num_less_8,"
            "pending_job_num_noless_8,pending_job_num_less_8,total_job_num_noless_8,total_job_num_less_8")
    out = [head]
    for k in range(rows):
        run = 100 + (k * 7) % 90
        out.append(f"2000-01-01 00:{k:02d}:00,9,8,1,8,7,1,200,{run},8,{200 - run},{run / 200:.3f},"
                   f"{run - 4},4,8,0,{run + 4},4,6,2,1,0,7,2")
    return "\n".join(out) + "\n"


def alibaba(rows):
    out = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"]
    for k in range(rows):
        c = k * 3600
        out.append(f"pod-{k:04d},{4000 + 1000 * (k % 4)},8192,{1 + k % 8},{[1000, 500, 250][k % 3]},,"
                   f"{['LS', 'BE'][k % 2]},{['Running', 'Succeeded', 'Failed'][k % 3]},{c},{c + 7200 * (1 + k % 5)},{c}")
    return "\n".join(out) + "\n"


def duty(rows):
    out = ["value,timestamp_anon,container_ip"]
    for k in range(rows):
        out.append(f"{(k * 13) % 101 / 100:.2f},{1000000000.0 + 60 * (k // 4)},c{k % 4:031d}")
    return "\n".join(out) + "\n"


def zeus(rows):
    out = ["dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power"]
    for k in range(rows):
        pl = 100 + 25 * (k % 8)
        out.append(f"synthetic,net{k // 8},256,sgd,{pl},{30.0 * 300 / (pl + 50):.3f},{0.9 * pl:.3f}")
    return "\n".join(out) + "\n"


def write(path, text):
    with open(os.path.join(HERE, path), "w") as f:
        f.write(text)


for d in ("corpus/epw", "corpus/traces"):
    os.makedirs(os.path.join(HERE, d), exist_ok=True)
write("corpus/epw/cold.epw", epw("SYNTH-COLD", 60.0, 2.0, 5.0, 80, 48))
write("corpus/epw/hot-humid.epw", epw("SYNTH-HOT", 1.3, 28.0, 3.0, 85, 48))
write("corpus/epw/desert.epw", epw("SYNTH-DRY", 32.0, 30.0, 9.0, 15, 48))
# The first byte picks the reader (byte % 4): '0' Helios, '1' Alibaba pods, '2' duty cycle, '3' Zeus.
write("corpus/traces/helios.csv", "0" + helios(20))
write("corpus/traces/alibaba.csv", "1" + alibaba(20))
write("corpus/traces/duty.csv", "2" + duty(20))
write("corpus/traces/zeus.csv", "3" + zeus(16))
