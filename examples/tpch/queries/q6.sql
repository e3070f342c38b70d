-- TPC-H Q6, forecasting revenue change; validation parameters DATE = 1994-01-01,
-- DISCOUNT = 0.06, QUANTITY = 24. The discount bounds DISCOUNT - 0.01 and DISCOUNT + 0.01
-- are written as the numbers they come to, so that an engine reading decimal literals as
-- binary floating point (0.06 + 0.01 = 0.06999999999999999) does not drop the rows at 0.07.
select
    sum(l_extendedprice * l_discount) as revenue
from
    lineitem
where
    l_shipdate >= date '1994-01-01'
    and l_shipdate < date '1994-01-01' + interval '1' year
    and l_discount between 0.05 and 0.07
    and l_quantity < 24;
