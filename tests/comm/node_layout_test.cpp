// How MpiCommunicator sees the nodes and picks its transport: the grid of nodes and local ranks
// built from every rank's node key (contiguous, interleaved as Open MPI's by-node mapping places
// ranks, and uneven), ZERO_NODE_SIZE's simulated nodes at every size, the automatic choice, and
// shared memory refused across nodes. The results of the two-level transport are checked bit for
// bit by the Collectives and VariableCounts suites ("Nodes"). Part of zero_test_collectives.

#include "comm_test.hpp"

#include <zero/comm/mpi_communicator.hpp>
#include <zero/comm/transport/hierarchical_transport.hpp>
#include <zero/core/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

namespace {

using zero::CommOptions;
using zero::MpiCommunicator;
using zero::ReduceOp;
using zero::Transport;
using zero::detail::NodeGrid;

TEST(NodeGrid, ContiguousRanksFormNodesInOrder) {
  const std::vector<int> keys{5, 5, 9, 9, 2, 2};
  const std::optional<NodeGrid> grid = NodeGrid::from_keys(keys, 3);
  ASSERT_TRUE(grid);
  EXPECT_EQ(grid->nodes, 3);
  EXPECT_EQ(grid->local_size, 2);
  EXPECT_EQ(grid->node, 1);
  EXPECT_EQ(grid->local, 1);
  EXPECT_EQ(grid->rank_at, (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST(NodeGrid, InterleavedRanksKeepRankOrderWithinANode) {
  // mpirun --map-by node: rank r on node r % 2.
  const std::vector<int> keys{0, 1, 0, 1};
  const std::optional<NodeGrid> grid = NodeGrid::from_keys(keys, 2);
  ASSERT_TRUE(grid);
  EXPECT_EQ(grid->nodes, 2);
  EXPECT_EQ(grid->node, 0);
  EXPECT_EQ(grid->local, 1);
  EXPECT_EQ(grid->rank(0, 0), 0);
  EXPECT_EQ(grid->rank(0, 1), 2);
  EXPECT_EQ(grid->rank(1, 0), 1);
  EXPECT_EQ(grid->rank(1, 1), 3);
}

TEST(NodeGrid, NodesOfDifferentSizesHaveNoGrid) {
  EXPECT_FALSE(NodeGrid::from_keys(std::vector<int>{0, 0, 1}, 0));
  EXPECT_FALSE(NodeGrid::from_keys(std::vector<int>{0, 0, 0, 1, 2, 2}, 0));
  EXPECT_TRUE(NodeGrid::from_keys(std::vector<int>{7}, 0));
}

CommOptions with(Transport transport, int node_size) {
  CommOptions o;
  o.transport = transport;
  o.node_size = node_size;
  o.chunk_bytes = 4096;
  return o;
}

// The simulated layouts below assume one machine; on several, ZERO_NODE_SIZE cuts each node.
bool on_one_machine() {
  return MpiCommunicator(boost::mpi::communicator(), with(Transport::automatic, 0)).nodes() == 1;
}

TEST(NodeLayout, EveryNodeSizeGivesItsGridOrFlatMpi) {
  if (!on_one_machine())
    GTEST_SKIP() << zero::testing::not_applicable << "the ranks span several machines";
  const int size = zero::testing::world().size();
  for (int k = 1; k <= size + 1; ++k) {
    MpiCommunicator comm(boost::mpi::communicator(), with(Transport::hierarchical, k));
    // Nodes of k ranks, the last one short when k does not divide the size (one node when k is
    // larger): a grid only when every node is full.
    const int local = std::min(k, size);
    const bool even = size % local == 0;
    SCOPED_TRACE("ZERO_NODE_SIZE=" + std::to_string(k));
    EXPECT_EQ(comm.nodes(), (size + k - 1) / k);
    EXPECT_EQ(std::string(comm.transport()), even ? "hierarchical" : "mpi");
    EXPECT_EQ(comm.ranks_per_node(), even ? local : 0);
    std::vector<std::vector<int>> order;
    for (int first = 0; first < size; first += even ? local : size) {
      order.emplace_back(std::size_t(even ? local : size));
      std::iota(order.back().begin(), order.back().end(), first);
    }
    EXPECT_EQ(comm.summation_order(), order);
    std::vector<int> rank_plus_one{comm.rank() + 1};
    comm.all_reduce(rank_plus_one, ReduceOp::sum).wait();
    EXPECT_EQ(rank_plus_one[0], size * (size + 1) / 2);
  }
}

TEST(NodeLayout, AutomaticUsesSharedMemoryOnOneNodeAndTwoLevelsAcrossNodes) {
  if (!on_one_machine())
    GTEST_SKIP() << zero::testing::not_applicable << "the ranks span several machines";
  const int size = zero::testing::world().size();
  MpiCommunicator one_node(boost::mpi::communicator(), with(Transport::automatic, size));
  EXPECT_EQ(std::string(one_node.transport()), "shm");
  EXPECT_EQ(one_node.nodes(), 1);
  MpiCommunicator every_rank_a_node(boost::mpi::communicator(), with(Transport::automatic, 1));
  EXPECT_EQ(std::string(every_rank_a_node.transport()), size == 1 ? "shm" : "hierarchical");
  EXPECT_EQ(every_rank_a_node.nodes(), size);
}

TEST(NodeLayout, SharedMemoryAcrossNodesIsRefusedWithTheLayout) {
  const int size = zero::testing::world().size();
  if (!on_one_machine())
    GTEST_SKIP() << zero::testing::not_applicable << "the ranks span several machines";
  if (size == 1) GTEST_SKIP() << zero::testing::not_applicable << "one rank is always one node";
  try {
    MpiCommunicator comm(boost::mpi::communicator(), with(Transport::shared_memory, 1));
    ADD_FAILURE() << "shm across " << size << " nodes was accepted";
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), zero::ErrorKind::unsupported);
    const std::string want =
        "ZERO_MPI_TRANSPORT=shm needs all ranks on one node: " + std::to_string(size) +
        " ranks on " + std::to_string(size) + " nodes (ZERO_NODE_SIZE)";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

// On a real cluster (tools/zero-cluster): the automatic transport is the two-level one, its
// groups are the machines, and ZERO_NODE_SIZE=1 still cuts them into single ranks.
TEST(NodeLayout, SeveralMachinesAreNodesOfTheTwoLevelTransport) {
  if (on_one_machine())
    GTEST_SKIP() << zero::testing::not_applicable << "the ranks share one machine";
  const int size = zero::testing::world().size();
  MpiCommunicator comm(boost::mpi::communicator(), with(Transport::automatic, 0));
  EXPECT_GT(comm.nodes(), 1);
  if (comm.ranks_per_node() > 0) {
    EXPECT_EQ(std::string(comm.transport()), "hierarchical");
    EXPECT_EQ(comm.nodes() * comm.ranks_per_node(), size);
    for (const std::vector<int>& node : comm.summation_order())
      EXPECT_EQ(static_cast<int>(node.size()), comm.ranks_per_node());
  } else {
    EXPECT_EQ(std::string(comm.transport()), "mpi");
  }
  MpiCommunicator singles(boost::mpi::communicator(), with(Transport::automatic, 1));
  EXPECT_EQ(singles.nodes(), size);
  EXPECT_EQ(std::string(singles.transport()), "hierarchical");
}

TEST(NodeLayout, ABadNodeSizeIsNamed) {
  const char* set = std::getenv("ZERO_NODE_SIZE");
  const std::optional<std::string> before = set ? std::optional<std::string>(set) : std::nullopt;
  for (const char* bad : {"-2", "1.5", "two"}) {
    ::setenv("ZERO_NODE_SIZE", bad, 1);
    try {
      (void)CommOptions::from_environment();
      ADD_FAILURE() << "ZERO_NODE_SIZE=" << bad << " was accepted";
    } catch (const zero::Error& e) {
      EXPECT_NE(std::string(e.what()).find("ZERO_NODE_SIZE"), std::string::npos) << e.what();
    }
  }
  if (before)
    ::setenv("ZERO_NODE_SIZE", before->c_str(), 1);
  else
    ::unsetenv("ZERO_NODE_SIZE");
}

} // namespace
