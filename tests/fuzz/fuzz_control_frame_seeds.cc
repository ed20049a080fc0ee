// Writes the seed corpus of fuzz_control_frame: one valid frame of every
// message type (and a few streams of several frames) into the directory named
// by argv[1], each prefixed with the chunk-size byte the fuzz target reads.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "control/protocol.h"

using namespace sluice::control;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <directory>\n", argv[0]);
    return 2;
  }
  const PeerEventMsg peer{3, PeerState::kDied, "no heartbeat for 5000 ms", "host-b", 4242};
  const std::vector<std::string> frames = {
      make_frame(MsgType::kHello, 1, encode(HelloMsg{2, 4, "host-a", 1234, "secret"})),
      make_frame(MsgType::kWelcome, 1, encode(WelcomeMsg{5000, {peer, PeerEventMsg{}}})),
      make_frame(MsgType::kError, 7,
                 encode(ErrorMsg{sluice::ErrorCode::kPeerLost, 3, "rank 3 died"})),
      make_frame(MsgType::kOk, 8, ""),
      make_frame(MsgType::kDeclare, 9,
                 encode(DeclareMsg{"orders", "record_size=16\nmode=shuffle\n", {0, 1, 2}, 60000})),
      make_frame(MsgType::kPut, 10, encode(PutMsg{"host/2", "host-a/boot/ns"})),
      make_frame(MsgType::kGet, 11, encode(GetMsg{"flow/orders/shm/1", 1, 1000})),
      make_frame(MsgType::kValue, 11, encode(ValueMsg{"123 7 65536 host-a"})),
      make_frame(MsgType::kBarrier, 12, encode(BarrierMsg{"step", 0, {}, 0})),
      make_frame(MsgType::kBarrier, 13,
                 encode(BarrierMsg{"slots", 500, {0, 1, uint64_t{1} << 32}, 1})),
      make_frame(MsgType::kOk, 12, encode(BarrierDoneMsg{41})),
      make_frame(MsgType::kErase, 14, encode(EraseMsg{"flow/orders/", true})),
      make_frame(MsgType::kOk, 14, encode(ErasedMsg{3})),
      make_frame(MsgType::kUndeclare, 15, encode(UndeclareMsg{"orders", 2000})),
      make_frame(MsgType::kHeartbeat, 0, ""),
      make_frame(MsgType::kLeave, 0, ""),
      make_frame(MsgType::kPeerEvent, 0, encode(peer)),
  };
  std::vector<std::string> inputs;
  for (const std::string& f : frames) {
    inputs.push_back(std::string(1, '\0') + f);  // all at once
    inputs.push_back(std::string(1, '\5') + f);  // in 5-byte pieces
  }
  std::string stream(1, '\x40');
  for (const std::string& f : frames) stream += f;
  inputs.push_back(stream);
  int n = 0;
  for (const std::string& in : inputs) {
    const std::string path = std::string(argv[1]) + "/seed-" + std::to_string(n++);
    std::ofstream out(path, std::ios::binary);
    out.write(in.data(), static_cast<std::streamsize>(in.size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
  }
  return 0;
}
