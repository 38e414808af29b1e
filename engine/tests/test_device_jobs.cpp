// The CPU side of the device join's jobs (experts/device_jobs.h): the ring slot layout the GPU writes and the CPU's
// share of a job: its pairs (token p / k, in pair order, distinct experts counted once) and their weighted sums per
// token, which the GPU's join adds to its own.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "check.h"
#include "experts/device_jobs.h"

using namespace strata;

static void test_layout() {
    for (int H : {32, 256, 2560, 4096}) {
        const size_t bytes = job_slot_bytes(H);
        CHECK(bytes % 256 == 0);
        CHECK(bytes >= kJobHeaderBytes + (size_t)2 * kDeviceTokens * H * sizeof(float));
        std::vector<uint8_t> slot(bytes);
        CHECK((uint8_t*)job_x(slot.data()) == slot.data() + kJobHeaderBytes);
        CHECK(job_out(slot.data(), H) == job_x(slot.data()) + (size_t)kDeviceTokens * H);
        CHECK((uint8_t*)(job_out(slot.data(), H) + (size_t)kDeviceTokens * H) <= slot.data() + bytes);
        CHECK(((size_t)((uint8_t*)job_out(slot.data(), H) - slot.data())) % 16 == 0);   // the join's 16-byte loads
    }
}

static void test_share() {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const int H = 48;
    CpuShare share;
    for (int round = 0; round < 200; ++round) {
        DeviceJob job{};
        job.k = 1 + (int)(rng() % 10);
        job.T = 1 + (int)(rng() % std::min(kDeviceTokens, kDevicePairs / job.k));
        const int P = job.T * job.k;
        int n_cpu = 0;
        for (int p = 0; p < P; ++p) {
            job.ids[p] = (int)(rng() % 12);
            job.weights[p] = u(rng);
            job.place[p] = (int)(rng() % 3);
            n_cpu += job.place[p] == kPairCpu;
        }
        collect_cpu_share(job, H, share);
        CHECK((int)share.pairs.size() == n_cpu && share.rows.size() == (size_t)n_cpu * H);
        std::vector<int> seen;
        for (size_t i = 0; i < share.pairs.size(); ++i) {
            const int p = share.pair_of[i];
            CHECK(job.place[p] == kPairCpu && share.pairs[i].token == p / job.k && share.pairs[i].expert == job.ids[p]);
            CHECK(i == 0 || share.pair_of[i - 1] < p);   // pair order
            bool dup = false;
            for (int e : seen) dup = dup || e == job.ids[p];
            if (!dup) seen.push_back(job.ids[p]);
        }
        CHECK(share.distinct == (int)seen.size());
        for (float& v : share.rows) v = u(rng);
        std::vector<float> out((size_t)job.T * H, NAN);
        sum_cpu_share(job, share, H, out.data());
        for (int t = 0; t < job.T; ++t)
            for (int c = 0; c < H; ++c) {
                float want = 0.0f;   // the same order: the token's CPU pairs, ascending p
                for (size_t i = 0; i < share.pairs.size(); ++i)
                    if (share.pairs[i].token == t) want += job.weights[share.pair_of[i]] * share.rows[i * H + c];
                CHECK(out[(size_t)t * H + c] == want);
            }
    }
}

int main() {
    test_layout();
    test_share();
    return test::exit_code();
}
